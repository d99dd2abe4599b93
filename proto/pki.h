/* pki.h: a throwaway certificate authority for hfl, written with mbedTLS
 * (EC P-256, ECDSA-SHA256; no openssl needed).
 *
 * hfl_pki_create writes into dir:
 *   ca.crt             the CA certificate (PEM)
 *   ca.key             the CA key (PEM, mode 0600)
 *   coordinator.pem    certificate (CN = server_cn) then key
 *   client-<i>.pem     certificate (CN = client-<i>) then key, i = 0..n_clients-1
 * mbedTLS 2.28 writes no subjectAltName, so the host name goes in the CN.
 * Each leaf's subject also names its role in the OU (proto/identity.h):
 * "coordinator" or "client", so one can never stand in for the other. */
#ifndef HFL_PKI_H
#define HFL_PKI_H

int hfl_pki_create(const char *dir, int n_clients, const char *server_cn, int valid_days,
                   char *err);
/* Issues one more certificate from the CA in dir (its ca.key): dir/<name>.pem
 * with the given role (client or coordinator). */
int hfl_pki_issue(const char *dir, const char *name, const char *role, int valid_days, char *err);

#endif
