/* Fuzz target: the cache's value decoders. cache_record_decode, cache_trial_decode and the job
 * journal's decoder. The job decoder is static in cache/job.c and reachable otherwise only
 * through an LMDB environment, so this file compiles job.c into itself (its code, unchanged)
 * and calls decode_job and encode_job directly.
 * Each decoder sees the input twice: as it is (the checksum almost never matches a mutated
 * input, which exercises the checksum path), and with its last CACHE_CHECKSUM_BYTES replaced by
 * the SHA-256 of the rest, so mutations reach the field decoders.
 * Invariants: a refusal is -EBADMSG or -ENOMEM with a message; a value that decodes encodes
 * again, and that encoding is a fixed point (decode then encode gives the same bytes). */
#include "fuzz.h"

#include "cache/job.c"
#include "cache/record.h"

#include <errno.h>
#include <string.h>

static void check_refusal(int rc, const kt_err *err)
{
    FUZZ_CHECK(rc == -EBADMSG || rc == -ENOMEM);
    FUZZ_CHECK(rc == -ENOMEM || err->msg[0]);
}

static void fuzz_record(const uint8_t *buf, size_t len)
{
    cache_record r, r2;
    kt_err err = {0};
    uint8_t *e1 = NULL, *e2 = NULL;
    size_t l1 = 0, l2 = 0;
    cache_record_init(&r);
    cache_record_init(&r2);
    int rc = cache_record_decode(buf, len, &r, &err);
    if (rc < 0) {
        check_refusal(rc, &err);
        goto out;
    }
    FUZZ_CHECK(cache_value_check(buf, len));
    FUZZ_CHECK(cache_record_encode(&r, &e1, &l1, &err) == 0);
    FUZZ_CHECK(cache_record_decode(e1, l1, &r2, &err) == 0);
    FUZZ_CHECK(cache_record_encode(&r2, &e2, &l2, &err) == 0);
    FUZZ_CHECK(l1 == l2 && memcmp(e1, e2, l1) == 0);
out:
    free(e1);
    free(e2);
    cache_record_free(&r);
    cache_record_free(&r2);
}

static void fuzz_trial(const uint8_t *buf, size_t len)
{
    cache_trial t, t2;
    kt_err err = {0};
    uint8_t *e1 = NULL, *e2 = NULL;
    size_t l1 = 0, l2 = 0;
    int rc = cache_trial_decode(buf, len, &t, &err);
    if (rc < 0) {
        check_refusal(rc, &err);
        return;
    }
    FUZZ_CHECK(memchr(t.cand, '\0', sizeof(t.cand)) && memchr(t.detail, '\0', sizeof(t.detail)));
    FUZZ_CHECK(cache_trial_status_name(t.status) != NULL);
    FUZZ_CHECK(cache_trial_encode(&t, &e1, &l1, &err) == 0);
    FUZZ_CHECK(cache_trial_decode(e1, l1, &t2, &err) == 0);
    FUZZ_CHECK(cache_trial_encode(&t2, &e2, &l2, &err) == 0);
    FUZZ_CHECK(l1 == l2 && memcmp(e1, e2, l1) == 0);
    free(e1);
    free(e2);
}

static void fuzz_job(const uint8_t *buf, size_t len)
{
    cache_job j, j2;
    kt_err err = {0};
    uint8_t *e1 = NULL, *e2 = NULL;
    size_t l1 = 0, l2 = 0;
    memset(&j2, 0, sizeof(j2));
    int rc = decode_job(buf, len, &j, &err);
    if (rc < 0) {
        check_refusal(rc, &err);
        return;
    }
    FUZZ_CHECK(cache_job_state_name(j.state) != NULL);
    FUZZ_CHECK(encode_job(&j, &e1, &l1, &err) == 0);
    FUZZ_CHECK(decode_job(e1, l1, &j2, &err) == 0);
    FUZZ_CHECK(encode_job(&j2, &e2, &l2, &err) == 0);
    FUZZ_CHECK(l1 == l2 && memcmp(e1, e2, l1) == 0);
    free(e1);
    free(e2);
    cache_job_free(&j);
    cache_job_free(&j2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_record(data, size);
    fuzz_trial(data, size);
    fuzz_job(data, size);
    if (size < CACHE_CHECKSUM_BYTES)
        return 0;
    uint8_t *fixed = malloc(size);
    FUZZ_CHECK(fixed);
    size_t body = size - CACHE_CHECKSUM_BYTES;
    memcpy(fixed, data, body);
    ops_sha256(fixed, body, fixed + body);
    fuzz_record(fixed, size);
    fuzz_trial(fixed, size);
    fuzz_job(fixed, size);
    free(fixed);
    return 0;
}
