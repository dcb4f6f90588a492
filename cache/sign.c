/* Bundle signing keys and trusted keys (Ed25519 through libsodium). Key files and the
 * signature's layout are in docs/formats.md (part 3); where they live, in docs/operations.md. */
#include "internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET_TAG "ktune-ed25519-secret "
#define PUBLIC_TAG "ktune-ed25519 "

_Static_assert(CACHE_SIGN_PUBLIC_BYTES == crypto_sign_PUBLICKEYBYTES, "public key size");
_Static_assert(CACHE_SIGN_SECRET_BYTES == crypto_sign_SECRETKEYBYTES, "secret key size");
_Static_assert(CACHE_SIGN_BYTES == crypto_sign_BYTES, "signature size");

static int sodium_ready(kt_err *err)
{
    if (sodium_init() < 0)
        return kt_err_set(err, -EIO, "libsodium cannot initialise (no entropy source?)");
    return 0;
}

void cache_key_id(const uint8_t pk[CACHE_SIGN_PUBLIC_BYTES], char out[CACHE_KEY_ID_LEN])
{
    char hex[2 * CACHE_SIGN_PUBLIC_BYTES + 1];
    kt_hex(pk, CACHE_SIGN_PUBLIC_BYTES, hex);
    snprintf(out, CACHE_KEY_ID_LEN, "ed25519:%.16s", hex);
}

void cache_signer_clear(cache_signer *s)
{
    if (s)
        sodium_memzero(s, sizeof(*s));
}

int cache_signer_generate(cache_signer *out, kt_err *err)
{
    int rc = sodium_ready(err);
    if (rc < 0)
        return rc;
    crypto_sign_keypair(out->pk, out->sk);
    return 0;
}

/* "TAG" followed by 2n hex digits and an optional newline, nothing else. */
static int parse_hex_line(const char *path, const char *text, size_t len, const char *tag,
                          uint8_t *out, size_t n, kt_err *err)
{
    size_t tl = strlen(tag);
    while (len && (text[len - 1] == '\n' || text[len - 1] == '\r'))
        len--;
    size_t bin = 0;
    if (len != tl + 2 * n || memcmp(text, tag, tl) != 0 ||
        sodium_hex2bin(out, n, text + tl, 2 * n, NULL, &bin, NULL) != 0 || bin != n)
        return kt_err_set(err, -EINVAL,
                          "%s: not a ktune key file (expected one line \"%s<%zu hex "
                          "digits>\")",
                          path, tag, 2 * n);
    return 0;
}

int cache_public_key_read(const char *path, uint8_t pk[CACHE_SIGN_PUBLIC_BYTES], kt_err *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = kt_read_file(path, 4096, &text, &len, err);
    if (rc < 0)
        return rc;
    rc = parse_hex_line(path, text, len, PUBLIC_TAG, pk, CACHE_SIGN_PUBLIC_BYTES, err);
    free(text);
    return rc;
}

int cache_public_key_write(const char *path, const uint8_t pk[CACHE_SIGN_PUBLIC_BYTES], kt_err *err)
{
    char line[sizeof(PUBLIC_TAG) + 2 * CACHE_SIGN_PUBLIC_BYTES + 2];
    char hex[2 * CACHE_SIGN_PUBLIC_BYTES + 1];
    kt_hex(pk, CACHE_SIGN_PUBLIC_BYTES, hex);
    int n = snprintf(line, sizeof(line), "%s%s\n", PUBLIC_TAG, hex);
    return kt_write_file(path, line, (size_t)n, 0644, err);
}

/* Reads the secret key file; -ENOENT when there is none. */
static int read_secret(const char *path, cache_signer *out, kt_err *err)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return kt_err_set(err, -errno, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return kt_err_set(err, -EINVAL, "%s: is %s, not a key file", path,
                          kt_file_kind(st.st_mode));
    /* a secret readable by others is no secret: refuse it rather than sign with it */
    if (st.st_mode & 077)
        return kt_err_set(err, -EACCES,
                          "%s: the signing key is readable by others (mode %04o); chmod 600 it, "
                          "or remove it and its .pub to make a new key",
                          path, (unsigned)(st.st_mode & 07777));
    char *text = NULL;
    size_t len = 0;
    int rc = kt_read_file(path, 4096, &text, &len, err);
    if (rc < 0)
        return rc;
    uint8_t seed[crypto_sign_SEEDBYTES];
    rc = parse_hex_line(path, text, len, SECRET_TAG, seed, sizeof(seed), err);
    sodium_memzero(text, len);
    free(text);
    if (rc == 0)
        crypto_sign_seed_keypair(out->pk, out->sk, seed);
    sodium_memzero(seed, sizeof(seed));
    return rc;
}

/* Writes a new secret key file; -EEXIST (nothing written) when another process made one first. */
static int create_secret(const char *path, cache_signer *out, kt_err *err)
{
    uint8_t seed[crypto_sign_SEEDBYTES];
    randombytes_buf(seed, sizeof(seed));
    char line[sizeof(SECRET_TAG) + 2 * sizeof(seed) + 2], hex[2 * sizeof(seed) + 1];
    kt_hex(seed, sizeof(seed), hex);
    int n = snprintf(line, sizeof(line), "%s%s\n", SECRET_TAG, hex);
    kt_atomic_file f;
    int rc = kt_atomic_begin(&f, path, 0600, err);
    if (rc == 0) {
        /* the umask may not take write or read bits away from the owner; 0600 whatever it is */
        if (fchmod(f.fd, 0600) < 0 || write(f.fd, line, (size_t)n) != n) {
            rc = kt_err_set(err, errno ? -errno : -EIO, "%s: cannot write: %s", path,
                            strerror(errno ? errno : EIO));
            kt_atomic_abort(&f);
        } else {
            rc = kt_atomic_commit_new(&f, err);
        }
    }
    if (rc == 0)
        crypto_sign_seed_keypair(out->pk, out->sk, seed);
    sodium_memzero(seed, sizeof(seed));
    sodium_memzero(line, sizeof(line));
    sodium_memzero(hex, sizeof(hex));
    return rc;
}

/* mkdir -p, mode 0755 (~/.config may not exist yet). */
static int make_dirs(const char *dir, kt_err *err)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s", dir) >= sizeof(path))
        return kt_err_set(err, -ENAMETOOLONG, "%s: path too long", dir);
    for (char *p = path + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end)
            continue;
        *p = '\0';
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
            return kt_err_set(err, -errno, "%s: cannot create the key directory: %s", path,
                              strerror(errno));
        if (end)
            return 0;
        *p = '/';
    }
}

int cache_signer_open(const char *dir, bool create, cache_signer *out, bool *created, kt_err *err)
{
    if (created)
        *created = false;
    int rc = sodium_ready(err);
    if (rc < 0)
        return rc;
    char sec[4096], pub[4096];
    if ((size_t)snprintf(sec, sizeof(sec), "%s/" CACHE_SIGN_SECRET_FILE, dir) >= sizeof(sec) ||
        (size_t)snprintf(pub, sizeof(pub), "%s/" CACHE_SIGN_PUBLIC_FILE, dir) >= sizeof(pub))
        return kt_err_set(err, -ENAMETOOLONG, "%s: path too long", dir);
    kt_err why = {0};
    rc = read_secret(sec, out, &why);
    if (rc == -ENOENT && create) {
        if ((rc = make_dirs(dir, err)) < 0)
            return rc;
        rc = create_secret(sec, out, &why);
        if (rc == 0 && created)
            *created = true;
        if (rc == -EEXIST) /* another exporter won the race: use its key */
            rc = read_secret(sec, out, &why);
    }
    if (rc < 0) {
        cache_signer_clear(out);
        return kt_err_set(err, rc, "%s", why.msg);
    }
    /* The .pub is what other hosts trust: (re)written from the secret whenever it is missing
     * or differs, so it always matches. */
    uint8_t have[CACHE_SIGN_PUBLIC_BYTES];
    if (cache_public_key_read(pub, have, NULL) < 0 || memcmp(have, out->pk, sizeof(have)) != 0) {
        if (!create)
            return 0;
        if ((rc = cache_public_key_write(pub, out->pk, err)) < 0)
            cache_signer_clear(out);
    }
    return rc;
}

/* ---- trust ---- */

int cache_trust_add(cache_trust *t, const uint8_t pk[CACHE_SIGN_PUBLIC_BYTES])
{
    for (size_t i = 0; i < t->n; i++)
        if (memcmp(t->keys[i], pk, CACHE_SIGN_PUBLIC_BYTES) == 0)
            return 0;
    if (kt_grow(&t->keys, &t->cap, t->n + 1, sizeof(*t->keys)) < 0)
        return -ENOMEM;
    memcpy(t->keys[t->n++], pk, CACHE_SIGN_PUBLIC_BYTES);
    return 0;
}

int cache_trust_add_dir(cache_trust *t, const char *dir, kt_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : kt_err_set(err, -errno, "%s: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".pub") != 0 || e->d_name[0] == '.')
            continue;
        char path[4096];
        uint8_t pk[CACHE_SIGN_PUBLIC_BYTES];
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= sizeof(path))
            rc = kt_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", dir, e->d_name);
        else if ((rc = cache_public_key_read(path, pk, err)) == 0 && cache_trust_add(t, pk) < 0)
            rc = kt_err_set(err, -ENOMEM, "out of memory reading %s", dir);
    }
    closedir(d);
    return rc;
}

void cache_trust_free(cache_trust *t)
{
    if (!t)
        return;
    free(t->keys);
    t->keys = NULL;
    t->n = t->cap = 0;
}

bool cache_trust_has(const cache_trust *t, const uint8_t pk[CACHE_SIGN_PUBLIC_BYTES])
{
    for (size_t i = 0; t && i < t->n; i++)
        if (memcmp(t->keys[i], pk, CACHE_SIGN_PUBLIC_BYTES) == 0)
            return true;
    return false;
}

/* ---- signatures ---- */

/* What is signed: a context string, so a signature over something else is never taken for a
 * bundle's, then the SHA-256 digest of the bundle's bytes before the signature block. */
static void signed_message(const uint8_t digest[32], uint8_t msg[CACHE_SIGN_CONTEXT_LEN + 32])
{
    memcpy(msg, CACHE_SIGN_CONTEXT, CACHE_SIGN_CONTEXT_LEN);
    memcpy(msg + CACHE_SIGN_CONTEXT_LEN, digest, 32);
}

int cache_sign_digest(const cache_signer *s, const uint8_t digest[32],
                      uint8_t sig[CACHE_SIGN_BYTES], kt_err *err)
{
    int rc = sodium_ready(err);
    if (rc < 0)
        return rc;
    uint8_t msg[CACHE_SIGN_CONTEXT_LEN + 32];
    signed_message(digest, msg);
    crypto_sign_detached(sig, NULL, msg, sizeof(msg), s->sk);
    return 0;
}

bool cache_verify_digest(const uint8_t pk[CACHE_SIGN_PUBLIC_BYTES], const uint8_t digest[32],
                         const uint8_t sig[CACHE_SIGN_BYTES])
{
    if (sodium_init() < 0)
        return false;
    uint8_t msg[CACHE_SIGN_CONTEXT_LEN + 32];
    signed_message(digest, msg);
    return crypto_sign_verify_detached(sig, msg, sizeof(msg), pk) == 0;
}
