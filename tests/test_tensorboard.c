/* tests/test_tensorboard.c — TensorBoard event files (core/tensorboard.c): CRC32C and the masked CRC against known
 * answers, the encoder's bytes, and a file written and read back with the tests' own reader (tbutil.h), which catches
 * any flipped byte. Not what a training run writes there. */
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "internal.h"
#include "tbutil.h"
#include "tensorboard.h"

#define MAX_EVENTS 16

static struct tb_event events[MAX_EVENTS];

static void rm_rf(const char *path)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    CU_ASSERT_FATAL(system(cmd) == 0);
}

/* ---- the format ---- */

/* CRC-32C's check value and iSCSI's test vectors (RFC 3720, B.4), from glia and from the reader's own table; and
 * the 12 bytes every TensorBoard event file begins with (a 24-byte version record's length and its masked CRC). */
static void test_crc32c_known_answers(void)
{
    uint8_t zeros[32] = {0}, ones[32], up[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++) up[i] = (uint8_t)i;
    CU_ASSERT_EQUAL(glia__crc32c("123456789", 9), 0xE3069283u);
    CU_ASSERT_EQUAL(glia__crc32c(zeros, 32), 0x8A9136AAu);
    CU_ASSERT_EQUAL(glia__crc32c(ones, 32), 0x62A8AB43u);
    CU_ASSERT_EQUAL(glia__crc32c(up, 32), 0x46DD794Eu);
    CU_ASSERT_EQUAL(glia__crc32c("", 0), 0u);
    CU_ASSERT_EQUAL(tb_crc32c((const uint8_t *)"123456789", 9), 0xE3069283u);
    CU_ASSERT_EQUAL(tb_crc32c(up, 32), 0x46DD794Eu);
    uint8_t len24[8] = {24};
    CU_ASSERT_EQUAL(glia__tb_mask(glia__crc32c(len24, 8)), 0x224b7fa3u);
    CU_ASSERT_EQUAL(tb_masked(len24, 8), 0x224b7fa3u);
    CU_ASSERT_EQUAL(glia__tb_mask(0), 0xa282ead8u);
    CU_ASSERT_EQUAL(glia__tb_mask(0x80000000u), 0xa282ead8u + 0x10000u);  /* bit 31 rotates to bit 16 */
    CU_ASSERT_EQUAL(glia__tb_mask(0x00008000u), 0xa282ead8u + 1u);         /* bit 15 rotates to bit 0 */
}

/* The encoder's bytes, written out by hand from the wire format; and a step past 2^32 through the reader. */
static void test_event_bytes(void)
{
    uint8_t buf[128];
    size_t n = glia__tb_version_event(buf, sizeof buf, 1.5);
    static const uint8_t version[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f,  /* wall_time 1.5 */
                                      0x1a, 13, 'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2'};
    CU_ASSERT_EQUAL_FATAL(n, sizeof version);
    CU_ASSERT_EQUAL(memcmp(buf, version, n), 0);
    n = glia__tb_scalar_event(buf, sizeof buf, 1.5, 300, "a/b", 0.25f);
    static const uint8_t scalar[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f,  /* wall_time */
                                     0x10, 0xac, 0x02,                      /* step 300 */
                                     0x2a, 12,                              /* summary */
                                     0x0a, 10,                              /* value */
                                     0x0a, 3, 'a', '/', 'b',                /* tag */
                                     0x15, 0, 0, 0x80, 0x3e};               /* simple_value 0.25 */
    CU_ASSERT_EQUAL_FATAL(n, sizeof scalar);
    CU_ASSERT_EQUAL(memcmp(buf, scalar, n), 0);
    n = glia__tb_scalar_event(buf, sizeof buf, 1e9 + 0.25, 5000000000LL, "train/loss", -3.5f);
    struct tb_event e;
    CU_ASSERT_FATAL(n > 0 && tb_event_decode(buf, n, &e));
    CU_ASSERT(e.has_step && e.step == 5000000000LL && e.wall == 1e9 + 0.25);
    CU_ASSERT(e.n_values == 1 && !strcmp(e.values[0].tag, "train/loss") && e.values[0].v == -3.5f);
    CU_ASSERT_EQUAL(glia__tb_scalar_event(buf, 20, 1.5, 300, "a/b", 0.25f), 0);  /* does not fit: nothing */
}

/* A file of records read back; then any one flipped byte is caught: in a length by its CRC, in data by the data's
 * CRC, in a CRC by itself. */
static void test_reader_catches_corruption(void)
{
    const char *d = glia_test_tmp("tensorboard-corrupt");
    rm_rf(d);
    struct glia__tb tb;
    CU_ASSERT_EQUAL_FATAL(glia__tb_open(&tb, d), 0);
    glia__tb_scalar(&tb, "train/loss", 1, 2.5);
    glia__tb_scalar(&tb, "train/lr", 1, 0.125);
    CU_ASSERT_EQUAL(glia__tb_close(&tb), 0);
    size_t n;
    uint8_t *buf = tb_slurp(tb.path, &n);
    glia__tb_free(&tb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    int count;
    CU_ASSERT_EQUAL(tb_parse(buf, n, events, MAX_EVENTS, &count), TB_OK);
    CU_ASSERT_EQUAL_FATAL(count, 3);
    CU_ASSERT_STRING_EQUAL(events[0].version, "brain.Event:2");
    CU_ASSERT(events[1].step == 1 && *tb_find(&events[1], "train/loss") == 2.5f);
    CU_ASSERT(events[2].step == 1 && *tb_find(&events[2], "train/lr") == 0.125f);
    size_t second = 16 + 24;  /* the second record, after the 24-byte version record's */
    struct {
        size_t at;
        int want;
    } flips[] = {{0, TB_HEADER_CRC}, {9, TB_HEADER_CRC}, {second + 3, TB_HEADER_CRC}, {12, TB_DATA_CRC},
                 {second + 12 + 5, TB_DATA_CRC}, {n - 1, TB_DATA_CRC}, {n - 10, TB_DATA_CRC}};
    for (size_t i = 0; i < GLIA__ARRAY_LEN(flips); i++) {
        uint8_t *bad = malloc(n);
        CU_ASSERT_FATAL(bad != NULL);
        memcpy(bad, buf, n);
        bad[flips[i].at] ^= 0x10;
        int rc = tb_parse(bad, n, events, MAX_EVENTS, &count);
        if (rc != flips[i].want) printf("\n  byte %zu flipped: %d, want %d\n", flips[i].at, rc, flips[i].want);
        CU_ASSERT_EQUAL(rc, flips[i].want);
        free(bad);
    }
    CU_ASSERT_EQUAL(tb_parse(buf, n - 1, events, MAX_EVENTS, &count), TB_SHORT);
    free(buf);
}

GLIA_TEST_MAIN("tensorboard", GLIA_TEST(test_crc32c_known_answers), GLIA_TEST(test_event_bytes),
               GLIA_TEST(test_reader_catches_corruption))
