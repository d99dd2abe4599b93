#!/usr/bin/env bash
# pki_strict.sh: hfl-pki's certificates read by a strict verifier (proto/pki_der.c).
# Python's cryptography, with every warning an error, loads the CA, the
# coordinator's, a client's and an issued client's certificate, checks each
# is signed ecdsa-with-SHA256 by the CA (verify_directly_issued_by) and that
# both signature algorithm identifiers are the bare SEQUENCE { OID } that
# RFC 5758 sec. 3.2 asks for: found in the DER, and the form with a NULL
# parameter (what mbedTLS 2.28 writes unaided) found nowhere. cryptography
# refuses (41.0.0) or warns about (41.0.1 on) the NULL form, so an older
# one proves nothing: it must be 41 or later, from the test-only virtual
# environment scripts/test makes (build/pyvenv); without it this skips (77).
# Usage: pki_strict.sh HFL_PKI
set -euo pipefail
pki=$1
py=""
for root in "${HFL_BUILD_ROOT:-}" "${HFL_SOURCE_ROOT:-.}/build"; do
  if [ -n "$root" ] && [ -x "$root/pyvenv/bin/python" ]; then py=$root/pyvenv/bin/python; break; fi
done
if [ -z "$py" ] || ! "$py" -c "import cryptography, sys; sys.exit(int(cryptography.__version__.split('.')[0]) < 41)" 2>/dev/null; then
  echo "SKIP: no build/pyvenv with Python's cryptography 41 or later (scripts/test installs it)"; exit 77
fi
tmp=$(mktemp -d /tmp/hfl-test-pki-strict-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$pki" --out "$tmp" --clients 2 > /dev/null
"$pki" issue extra --out "$tmp" > /dev/null
"$py" -W error - "$tmp" <<'PY'
import sys, warnings
warnings.simplefilter("error")  # a deprecation warning about the encoding fails the test
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import SignatureAlgorithmOID

d = sys.argv[1]
# ecdsa-with-SHA256 (1.2.840.10045.4.3.2) as an AlgorithmIdentifier: bare, and with NULL
bare = bytes.fromhex("300a06082a8648ce3d040302")
with_null = bytes.fromhex("300c06082a8648ce3d0403020500")
with open(f"{d}/ca.crt", "rb") as f:
    ca = x509.load_pem_x509_certificate(f.read())
for name in ["ca.crt", "coordinator.pem", "client-0.pem", "client-1.pem", "extra.pem"]:
    with open(f"{d}/{name}", "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    cert.verify_directly_issued_by(ca)
    der = cert.public_bytes(Encoding.DER)
    assert cert.signature_algorithm_oid == SignatureAlgorithmOID.ECDSA_WITH_SHA256, name
    assert bare in cert.tbs_certificate_bytes, f"{name}: the signed part has no bare ecdsa-with-SHA256"
    assert der.count(bare) == 2, f"{name}: {der.count(bare)} bare identifiers, expected 2"
    assert with_null not in der, f"{name}: a NULL parameter in a signature algorithm"
    print(f"{name}: {cert.subject.rfc4514_string()}, issued by {cert.issuer.rfc4514_string()}: strict OK")
PY
