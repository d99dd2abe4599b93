/* crc32c.c: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the
 * checksum over an hfl message's meta and payload.
 *
 * Slicing-by-8: eight 256-entry tables let the main loop fold eight input
 * bytes per step. Bytes are loaded one at a time, so the code is correct on
 * any host byte order. The tables are built once, under pthread_once. */
#include "proto/msg.h"

#include <pthread.h>

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc32c_table[8][256];
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

static void crc32c_build_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc32c_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc32c_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = crc32c_table[0][c & 0xff] ^ (c >> 8);
            crc32c_table[t][n] = c;
        }
    }
}

uint32_t hfl_crc32c(uint32_t crc, const void *data, size_t len) {
    pthread_once(&crc32c_once, crc32c_build_tables);
    const uint8_t *p = data;
    uint32_t c = ~crc;
    while (len >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = crc32c_table[7][lo & 0xff] ^ crc32c_table[6][(lo >> 8) & 0xff] ^
            crc32c_table[5][(lo >> 16) & 0xff] ^ crc32c_table[4][lo >> 24] ^
            crc32c_table[3][p[4]] ^ crc32c_table[2][p[5]] ^ crc32c_table[1][p[6]] ^
            crc32c_table[0][p[7]];
        p += 8;
        len -= 8;
    }
    while (len--) c = crc32c_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}
