/*
 * Native scanner for TensorRT builder verbose logs.
 *
 * This is the same state machine as reprobuild/logparse.py (LogParser), ported line for
 * line so that a 1 GB log parses at a useful fraction of grep's speed. The Python parser
 * is the specification: tests/test_logscan.py feeds both the fixtures, every chunking of
 * them and hypothesis-mutated logs and requires identical records, warnings and engine
 * layers. Each function below names the Python method it mirrors; the regular expressions
 * of logparse.py (ASCII semantics) are written out as explicit scans, with the
 * backtracking cases that decide a match spelled out next to them.
 *
 * Work happens on bytes: every delimiter is ASCII, so byte offsets and the Python
 * parser's character offsets cut the same substrings, and str objects are only made
 * (UTF-8, errors="replace") for values that end up in records. Integers and floats with
 * anything unusual in them (underscores, Unicode digits, "inf") are handed to Python's
 * own int()/float(), so their odd corners match by construction.
 *
 * Where the time goes, and so how the file is laid out: most lines need only be looked at
 * once, so a single vector pass per chunk (feed_avx2; flags_ssse3 / the SSE2 trigram scan
 * where the CPU lacks AVX2, or REPROBUILD_LOGSCAN_ISA says so) finds each newline and
 * the places where a trigger word of LogParser._line may start; flag_at confirms them and
 * records where "Tactic", "Layer" and ", 0x" stand, so the handlers compare at those
 * positions instead of searching again. What remains is making Python objects: strings and
 * ints come from small caches (kernel names repeat all through a log), Candidate is a C
 * type with its numbers unboxed and a free list, and the record classes are filled
 * without running their __init__.
 */
#define PY_SSIZE_T_CLEAN
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memrchr; the value pyconfig.h gives it */
#endif
#include <Python.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <stdint.h>
#include <structmember.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#define MAX_LINE (1 << 20)
#define MAX_CANDIDATES 100000
#define MAX_ORPHANS 4096
#define MAX_ENGINE_LAYERS 100000

/* ---- character classes --------------------------------------------------------------- */

/* str.strip() restricted to ASCII: logparse._WS */
static int is_ws(unsigned char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}
/* regex \s with re.ASCII */
static int is_rs(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_hex(unsigned char c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
/* [^\s,] */
static int is_tok(unsigned char c) { return !is_rs(c) && c != ','; }

/* ---- byte-span helpers (Python str methods on a slice of the line) ------------------- */

typedef const unsigned char U;

/* needles are literals: inlined, their lengths fold to constants and the compares to a
 * few loads */
#define ALWAYS_INLINE __attribute__((always_inline)) inline

/* Substring search for the short literal needles of this file. Log lines are short, so
 * glibc's memmem spends more on set-up than on searching; instead, sixteen positions at a
 * time are tested for the needle's first and last bytes (SSE2), and only those hits are
 * compared in full. */
ALWAYS_INLINE static Py_ssize_t find(U *s, Py_ssize_t start, Py_ssize_t end, const char *needle) {
    const Py_ssize_t m = (Py_ssize_t)strlen(needle);
    if (start < 0) start = 0;
    Py_ssize_t i = start;
    if (m == 1) {
        U *p = i < end ? memchr(s + i, needle[0], (size_t)(end - i)) : NULL;
        return p ? p - s : -1;
    }
#ifdef __SSE2__
    const __m128i first = _mm_set1_epi8(needle[0]);
    const __m128i lastc = _mm_set1_epi8(needle[m - 1]);
    for (; i + m - 1 + 16 <= end; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + m - 1));
        unsigned mask = (unsigned)_mm_movemask_epi8(
            _mm_and_si128(_mm_cmpeq_epi8(a, first), _mm_cmpeq_epi8(b, lastc)));
        while (mask) {
            int bit = __builtin_ctz(mask);
            if (memcmp(s + i + bit + 1, needle + 1, (size_t)(m - 2)) == 0) return i + bit;
            mask &= mask - 1;
        }
    }
#endif
    for (; i + m <= end; i++)
        if (s[i] == (unsigned char)needle[0] && s[i + m - 1] == (unsigned char)needle[m - 1] &&
            memcmp(s + i + 1, needle + 1, (size_t)(m - 2)) == 0)
            return i;
    return -1;
}

ALWAYS_INLINE static Py_ssize_t rfind(U *s, Py_ssize_t start, Py_ssize_t end, const char *needle) {
    Py_ssize_t m = (Py_ssize_t)strlen(needle);
    if (start < 0) start = 0;
    Py_ssize_t hi = end - m; /* last possible start */
    while (hi >= start) {
        U *p = memrchr(s + start, needle[0], (size_t)(hi - start + 1));
        if (!p) return -1;
        Py_ssize_t at = p - s;
        if (memcmp(s + at, needle, (size_t)m) == 0) return at;
        hi = at - 1;
    }
    return -1;
}

ALWAYS_INLINE static int startswith(U *s, Py_ssize_t a, Py_ssize_t b, const char *prefix) {
    Py_ssize_t m = (Py_ssize_t)strlen(prefix);
    return b - a >= m && memcmp(s + a, prefix, (size_t)m) == 0;
}

ALWAYS_INLINE static int endswith(U *s, Py_ssize_t a, Py_ssize_t b, const char *suffix) {
    Py_ssize_t m = (Py_ssize_t)strlen(suffix);
    return b - a >= m && memcmp(s + b - m, suffix, (size_t)m) == 0;
}

ALWAYS_INLINE static int contains(U *s, Py_ssize_t a, Py_ssize_t b, const char *needle) {
    return find(s, a, b, needle) >= 0;
}

/* every byte of s[a:b] ASCII: then str.strip() and friends act as our ASCII versions */
static int is_ascii(U *s, Py_ssize_t a, Py_ssize_t b) {
    unsigned char acc = 0;
    for (Py_ssize_t i = a; i < b; i++) acc |= s[i];
    return acc < 0x80;
}

static void strip(U *s, Py_ssize_t *a, Py_ssize_t *b) {
    while (*a < *b && is_ws(s[*a])) (*a)++;
    while (*b > *a && is_ws(s[*b - 1])) (*b)--;
}

static Py_ssize_t skip_rs(U *s, Py_ssize_t p, Py_ssize_t n) {
    while (p < n && is_rs(s[p])) p++;
    return p;
}

static Py_ssize_t tok_end(U *s, Py_ssize_t p, Py_ssize_t n) {
    while (p < n && is_tok(s[p])) p++;
    return p;
}

static unsigned char lower(unsigned char c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

ALWAYS_INLINE static int ci_at(U *s, Py_ssize_t i, Py_ssize_t end, const char *needle) {
    Py_ssize_t m = (Py_ssize_t)strlen(needle);
    if (end - i < m) return 0;
    for (Py_ssize_t k = 0; k < m; k++)
        if (lower(s[i + k]) != (unsigned char)needle[k]) return 0;
    return 1;
}

/* Bytes taken by the first character Python's UTF-8 decoder (errors="replace") yields:
 * a valid sequence, or the maximal invalid subpart that becomes one U+FFFD. */
static Py_ssize_t utf8_char_len(U *s, Py_ssize_t n) {
    unsigned c = s[0];
    if (c < 0xC2 || c > 0xF4) return 1;
    int need = c < 0xE0 ? 1 : (c < 0xF0 ? 2 : 3);
    unsigned lo = 0x80, hi = 0xBF;
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F;
    else if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;
    Py_ssize_t k = 1;
    if (k < n && s[k] >= lo && s[k] <= hi) {
        k++;
        while (k <= need && k < n && s[k] >= 0x80 && s[k] <= 0xBF) k++;
    }
    return k;
}

/* ---- Python values --------------------------------------------------------------------- */

static PyObject *empty_str;  /* "" */
static PyObject *s_runner, *s_reformat, *s_legacy, *s_editable, *s_myelin, *s_cached;
static PyObject *a_layer, *a_key, *a_onnx_layers, *a_candidates, *a_chosen, *a_chosen_kernel,
    *a_chosen_cost_ms, *a_from_cache, *a_runner, *a_line, *a_format, *a_formats;
static PyObject *a_lineno, *a_warnings, *a_warnings_dropped, *a_engine_layers;
static PyObject *k_invalid, *k_not_used, *k_error, *k_miss, *k_loaded, *k_in_use, *k_local,
    *k_serialized;

/* Kernel, runner and layer names repeat throughout a log (the same kernels are timed for
 * many layers), so decoded strings and tactic ints are memoised in small direct-mapped
 * tables: most values then cost a hash and a memcmp instead of an allocation. */
/* Decoded strings by their bytes: 1024 sets of 4 ways, one cache line per set, each way
 * with its length and a tag so that only a likely match is compared in full. */
#define STR_SETS 1024
#define STR_WAYS 4
#define STR_CACHE_MAX 256
static struct {
    PyObject *str[STR_WAYS]; /* ASCII strs: their bytes are the key */
    uint32_t len[STR_WAYS];
    uint32_t tag[STR_WAYS];
} str_sets[STR_SETS];
static unsigned str_victim;

#define INT_CACHE 1024
static struct {
    uint64_t value;
    PyObject *obj;
} int_cache[INT_CACHE];

/* A hash of the whole string: kernel names differ anywhere (tile sizes, layouts), so
 * sampling a few bytes crowds similar names into one set. CRC32C takes eight bytes per
 * instruction where the CPU has it (three chains: its latency is three cycles). */
#if defined(__x86_64__)
static int have_sse42;

__attribute__((target("sse4.2"))) static uint64_t hash_crc(U *p, Py_ssize_t n) {
    uint64_t h0 = (uint64_t)n, h1 = 0x9E3779B9u, h2 = 0x85EBCA6Bu, w0, w1, w2;
    Py_ssize_t i = 0;
    for (; i + 24 <= n; i += 24) {
        memcpy(&w0, p + i, 8);
        memcpy(&w1, p + i + 8, 8);
        memcpy(&w2, p + i + 16, 8);
        h0 = _mm_crc32_u64(h0, w0);
        h1 = _mm_crc32_u64(h1, w1);
        h2 = _mm_crc32_u64(h2, w2);
    }
    for (; i + 8 <= n; i += 8) {
        memcpy(&w0, p + i, 8);
        h0 = _mm_crc32_u64(h0, w0);
    }
    w0 = 0;
    memcpy(&w0, p + i, (size_t)(n - i));
    h0 = _mm_crc32_u64(h0, w0);
    return (h0 ^ (h1 << 21) ^ (h2 << 42)) * 0x9E3779B97F4A7C15ULL;
}
#endif

static uint64_t str_hash(U *p, Py_ssize_t n) {
#if defined(__x86_64__)
    if (have_sse42) return hash_crc(p, n);
#endif
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n, w;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, p + i, (size_t)(n - i));
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

/* memcmp(a, b, n) == 0 without a library call (n is usually 20-120 here) */
ALWAYS_INLINE static int bytes_eq(U *a, U *b, Py_ssize_t n) {
#ifdef __SSE2__
    if (n >= 16) {
        Py_ssize_t i = 0;
        for (; i + 16 <= n; i += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(a + i));
            __m128i y = _mm_loadu_si128((const __m128i *)(b + i));
            if (_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)) != 0xFFFF) return 0;
        }
        if (i < n) { /* the last 16 bytes, overlapping */
            __m128i x = _mm_loadu_si128((const __m128i *)(a + n - 16));
            __m128i y = _mm_loadu_si128((const __m128i *)(b + n - 16));
            if (_mm_movemask_epi8(_mm_cmpeq_epi8(x, y)) != 0xFFFF) return 0;
        }
        return 1;
    }
#endif
    return memcmp(a, b, (size_t)n) == 0;
}

static PyObject *mkstr(U *s, Py_ssize_t a, Py_ssize_t b) {
    if (b <= a) return Py_NewRef(empty_str);
    Py_ssize_t n = b - a;
    if (n > STR_CACHE_MAX) return PyUnicode_DecodeUTF8((const char *)s + a, n, "replace");
    uint64_t h = str_hash(s + a, n);
    unsigned set = (unsigned)(h >> 20) & (STR_SETS - 1);
    uint32_t tag = (uint32_t)(h >> 32);
    for (int w = 0; w < STR_WAYS; w++) {
        if (str_sets[set].tag[w] == tag && str_sets[set].len[w] == (uint32_t)n) {
            PyObject *c = str_sets[set].str[w];
            if (c && bytes_eq(PyUnicode_1BYTE_DATA(c), s + a, n)) return Py_NewRef(c);
        }
    }
    PyObject *o = PyUnicode_DecodeUTF8((const char *)s + a, n, "replace");
    if (!o) return NULL;
    if (PyUnicode_IS_ASCII(o)) { /* then its data are the bytes it was made from */
        int w = (int)(str_victim++ & (STR_WAYS - 1));
        Py_XSETREF(str_sets[set].str[w], Py_NewRef(o));
        str_sets[set].len[w] = (uint32_t)n;
        str_sets[set].tag[w] = tag;
    }
    return o;
}

ALWAYS_INLINE static PyObject *mkint(uint64_t v) {
    size_t slot = (size_t)((v * 0x9E3779B97F4A7C15ULL) >> 52) & (INT_CACHE - 1);
    if (int_cache[slot].obj && int_cache[slot].value == v) return Py_NewRef(int_cache[slot].obj);
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    if (!o) return NULL;
    Py_XSETREF(int_cache[slot].obj, Py_NewRef(o));
    int_cache[slot].value = v;
    return o;
}

/* str or None for an empty value (Python's `x or None`) */
static PyObject *mkstr_or_none(U *s, Py_ssize_t a, Py_ssize_t b) {
    if (b <= a) Py_RETURN_NONE;
    return mkstr(s, a, b);
}

static PyObject *strip_str(U *s, Py_ssize_t a, Py_ssize_t b) {
    strip(s, &a, &b);
    return mkstr(s, a, b);
}

static int str_nonempty(PyObject *o) { return o != NULL && o != Py_None && PyUnicode_GET_LENGTH(o) > 0; }

/* Python equality of two optional str values (NULL means None). */
static int opt_eq(PyObject *a, PyObject *b) {
    if (a == Py_None) a = NULL;
    if (b == Py_None) b = NULL;
    if (a == NULL || b == NULL) return a == b;
    if (a == b) return 1;
    return PyUnicode_Compare(a, b) == 0;
}

/* --- integers: fast path for clean ASCII, Python int() otherwise ---------------------- */

typedef struct {
    int ok;        /* the text is an int */
    int neg;       /* value < 0 */
    int big;       /* |value| >= 2**64 */
    uint64_t mag;  /* |value| when !big */
} IntVal;

/* End of the readable bytes around the current line (its buffer, or the carry buffer with
 * its 64 bytes of slack): word and vector loads may run past the line up to here. */
static U *cur_end;

/* The run of ASCII digits at p, at most 8 and at most lim of them: returns the count and
 * their value in *v. Eight bytes are tested and converted at once (SWAR): bytes after the
 * run may be anything, since they are shifted out before the conversion. */
ALWAYS_INLINE static int digits8(U *p, Py_ssize_t lim, uint64_t *v) {
    if (lim <= 0) {
        *v = 0;
        return 0;
    }
    if (p + 8 > cur_end) {
        int c = 0;
        uint64_t m = 0;
        while (c < 8 && c < lim && is_digit(p[c])) m = m * 10 + (uint64_t)(p[c++] - '0');
        *v = m;
        return c;
    }
    uint64_t w;
    memcpy(&w, p, 8);
    uint64_t t = w - 0x3030303030303030ULL;
    uint64_t bad = ((t + 0x0606060606060606ULL) | t) & 0xF0F0F0F0F0F0F0F0ULL;
    int c = bad ? __builtin_ctzll(bad) >> 3 : 8;
    if (c > lim) c = (int)lim;
    if (c == 0) {
        *v = 0;
        return 0;
    }
    t <<= 8 * (8 - c); /* the digits to the top bytes, zeros (leading zeros) below */
    t = t * 10 + (t >> 8);
    t = (((t & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
         (((t >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >> 32;
    *v = t;
    return c;
}

static const uint64_t POW10[] = {1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL,
                                 10000000ULL, 100000000ULL};

/* digits at s[k..b): accumulates into *mant, returns how many (stops after 16) */
ALWAYS_INLINE static Py_ssize_t digit_run(U *s, Py_ssize_t k, Py_ssize_t b, uint64_t *mant) {
    Py_ssize_t n = 0;
    for (;;) {
        uint64_t v;
        int c = digits8(s + k + n, b - k - n, &v);
        *mant = *mant * POW10[c] + v;
        n += c;
        if (c < 8 || n > 16) return n;
    }
}

/* digit values for bases 10 and 16; 0xFF for anything else */
static unsigned char DIGVAL[256];

static void init_digval(void) {
    memset(DIGVAL, 0xFF, sizeof(DIGVAL));
    for (int c = '0'; c <= '9'; c++) DIGVAL[c] = (unsigned char)(c - '0');
    for (int c = 'a'; c <= 'f'; c++) DIGVAL[c] = DIGVAL[c - 32] = (unsigned char)(c - 'a' + 10);
}

/* int(text, base) for anything unusual (whitespace, underscores, Unicode digits, huge) */
static int parse_int_slow(U *s, Py_ssize_t a, Py_ssize_t b, int base, IntVal *v) {
    PyObject *text = mkstr(s, a, b);
    if (!text) return -1;
    PyObject *num = PyLong_FromUnicodeObject(text, base);
    Py_DECREF(text);
    if (!num) {
        if (PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    PyObject *zero = PyLong_FromLong(0);
    int neg = zero ? PyObject_RichCompareBool(num, zero, Py_LT) : -1;
    Py_XDECREF(zero);
    if (neg < 0) {
        Py_DECREF(num);
        return -1;
    }
    v->ok = 1;
    v->neg = neg;
    PyObject *absval = neg ? PyNumber_Negative(num) : Py_NewRef(num);
    Py_DECREF(num);
    if (!absval) return -1;
    unsigned long long m = PyLong_AsUnsignedLongLong(absval);
    Py_DECREF(absval);
    if (m == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
        v->big = 1;
    } else {
        v->mag = m;
    }
    return 0;
}

/* int(text, base) (base 10 or 16), the way Python reads it. Returns -1 on a Python error.
 * Clean ASCII ([+-], 0x for base 16, digits that fit 64 bits) is read here. */
ALWAYS_INLINE static int parse_int(U *s, Py_ssize_t a, Py_ssize_t b, int base, IntVal *v) {
    v->ok = v->neg = v->big = 0;
    v->mag = 0;
    Py_ssize_t i = a;
    int neg = 0;
    if (i < b && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
    if (base == 16 && b - i >= 2 && s[i] == '0' && (s[i + 1] | 0x20) == 'x') i += 2;
    Py_ssize_t nd = b - i;
#ifdef __SSE2__
    if (base == 16 && nd > 0 && nd <= 16 && s + i + 16 <= cur_end) { /* sixteen at once */
        const __m128i x = _mm_loadu_si128((const __m128i *)(s + i));
        const __m128i d = _mm_sub_epi8(x, _mm_set1_epi8('0'));
        const __m128i l = _mm_sub_epi8(_mm_or_si128(x, _mm_set1_epi8(0x20)), _mm_set1_epi8('a'));
        const __m128i isd = _mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d);
        const __m128i isl = _mm_cmpeq_epi8(_mm_min_epu8(l, _mm_set1_epi8(5)), l);
        const unsigned want = nd == 16 ? 0xFFFFu : (1u << nd) - 1;
        if ((_mm_movemask_epi8(_mm_or_si128(isd, isl)) & want) == want) {
            __m128i vals = _mm_or_si128(_mm_and_si128(isd, d),
                                        _mm_andnot_si128(isd, _mm_add_epi8(l, _mm_set1_epi8(10))));
            /* zero the bytes past the token: the value is then the top nd nibbles */
            const __m128i idx = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            vals = _mm_and_si128(vals, _mm_cmplt_epi8(idx, _mm_set1_epi8((char)nd)));
            /* 16-bit lane k holds digits 2k (low byte) and 2k+1: make (2k << 4) | 2k+1 */
            __m128i pairs = _mm_or_si128(
                _mm_slli_epi16(_mm_and_si128(vals, _mm_set1_epi16(0x00FF)), 4),
                _mm_srli_epi16(vals, 8));
            __m128i packed = _mm_packus_epi16(pairs, pairs);
            uint64_t m;
            memcpy(&m, &packed, 8);
            m = __builtin_bswap64(m) >> (4 * (16 - nd));
            v->ok = 1;
            v->neg = neg && m != 0;
            v->mag = m;
            return 0;
        }
    }
#endif
    if (base == 10 && nd > 0 && nd <= 16) {
        uint64_t m = 0;
        if (digit_run(s, i, b, &m) == nd) {
            v->ok = 1;
            v->neg = neg && m != 0;
            v->mag = m;
            return 0;
        }
        return parse_int_slow(s, a, b, base, v);
    }
    if (nd > 0 && nd <= (base == 16 ? 16 : 19)) { /* < 2**64 */
        uint64_t m = 0;
        Py_ssize_t k = i;
        for (; k < b; k++) {
            unsigned d = DIGVAL[s[k]];
            if (d >= (unsigned)base) break;
            m = m * (unsigned)base + d;
        }
        if (k == b) {
            v->ok = 1;
            v->neg = neg && m != 0;
            v->mag = m;
            return 0;
        }
    }
    return parse_int_slow(s, a, b, base, v);
}

/* 0 <= v < 2**64, no normalisation (LogParser._tactic_family's fast path, _row) */
static int as_u64(const IntVal *v, uint64_t *out) {
    if (!v->ok || v->big || v->neg) return 0;
    *out = v->mag;
    return 1;
}

/* negatives as two's complement (layerinfo.tactic_to_int, logparse._tac) */
static int as_tactic(const IntVal *v, uint64_t *out) {
    if (!v->ok || v->big) return 0;
    if (!v->neg) {
        *out = v->mag;
        return 1;
    }
    if (v->mag > ((uint64_t)1 << 63)) return 0;
    *out = (uint64_t)0 - v->mag;
    return 1;
}

static int has_hex_prefix(U *s, Py_ssize_t a, Py_ssize_t b) {
    return b - a >= 2 && s[a] == '0' && (s[a + 1] == 'x' || s[a + 1] == 'X');
}

/* logparse._tac (tok already cut, not stripped: int() strips by itself) */
static int tac_tok(U *s, Py_ssize_t a, Py_ssize_t b, uint64_t *out) {
    IntVal v;
    if (parse_int(s, a, b, has_hex_prefix(s, a, b) ? 16 : 10, &v) < 0) return -1;
    return as_tactic(&v, out);
}

/* layerinfo.tactic_to_int(str): strip, then the same as _tac */
static int tactic_to_int(U *s, Py_ssize_t a, Py_ssize_t b, uint64_t *out) {
    Py_ssize_t a2 = a, b2 = b;
    strip(s, &a2, &b2);
    if (!is_ascii(s, a, b)) {
        /* str.strip() removes Unicode whitespace too: let Python strip, then decide */
        PyObject *text = mkstr(s, a, b);
        if (!text) return -1;
        PyObject *stripped = PyObject_CallMethod(text, "strip", NULL);
        Py_DECREF(text);
        if (!stripped) return -1;
        Py_ssize_t len;
        const char *u = PyUnicode_AsUTF8AndSize(stripped, &len);
        if (!u) {
            Py_DECREF(stripped);
            return -1;
        }
        U *end = cur_end;
        cur_end = NULL; /* not the line's buffer: no word or vector loads past its end */
        int r = tac_tok((U *)u, 0, len, out);
        cur_end = end;
        Py_DECREF(stripped);
        return r;
    }
    return tac_tok(s, a2, b2, out);
}

/* --- floats ------------------------------------------------------------------------------ */

/* float(text) for anything but plain decimals: returns 1 with *out, 0 on ValueError,
 * -1 on a Python error */
static int py_float_slow(U *s, Py_ssize_t a, Py_ssize_t b, double *out) {
    /* float() strips " \t\n\v\f\r" (and Unicode spaces, left to Python below), but not
     * the \x1c-\x1f that str.strip() removes */
    Py_ssize_t i = a, e = b;
    while (i < e && is_rs(s[i])) i++;
    while (e > i && is_rs(s[e - 1])) e--;
    int clean = i < e && e - i < 64;
    for (Py_ssize_t k = i; clean && k < e; k++) {
        unsigned char c = s[k];
        clean = is_digit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
    }
    if (clean) {
        char buf[64];
        memcpy(buf, s + i, (size_t)(e - i));
        buf[e - i] = 0;
        char *end = NULL;
        double d = PyOS_string_to_double(buf, &end, NULL);
        if (PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_ValueError)) return -1;
            PyErr_Clear();
            return 0;
        }
        if (end == buf + (e - i)) {
            *out = d;
            return 1;
        }
        return 0;
    }
    PyObject *text = mkstr(s, a, b);
    if (!text) return -1;
    PyObject *f = PyFloat_FromString(text);
    Py_DECREF(text);
    if (!f) {
        if (PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    *out = PyFloat_AS_DOUBLE(f);
    Py_DECREF(f);
    return 1;
}

/* float(text): returns 1 with *out, 0 on ValueError, -1 on a Python error. Plain
 * decimals ([+-]d*.d*, at most 15 digits) are read here: the mantissa and 10**k are
 * exact doubles, so one division gives the correctly rounded value, the same double
 * strtod (and so float()) returns. */
ALWAYS_INLINE static int py_float(U *s, Py_ssize_t a, Py_ssize_t b, double *out) {
    static const double P10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    Py_ssize_t k = a;
    while (k < b && s[k] == ' ') k++;
    int neg = 0;
    if (k < b && (s[k] == '-' || s[k] == '+')) neg = s[k++] == '-';
    uint64_t mant = 0;
    Py_ssize_t nd = digit_run(s, k, b, &mant), frac = 0;
    k += nd;
    if (k < b && s[k] == '.' && nd <= 15) {
        k++;
        frac = digit_run(s, k, b, &mant);
        k += frac;
        nd += frac;
    }
    if (k == b && nd > 0 && nd <= 15) {
        double d = (double)mant / P10[frac];
        *out = neg ? -d : d;
        return 1;
    }
    return py_float_slow(s, a, b, out);
}

/* logparse._float: None for empty/unreadable text, after rstrip(",;") */
static int opt_float(U *s, Py_ssize_t a, Py_ssize_t b, int *has, double *out) {
    *has = 0;
    if (b <= a) return 0;
    while (b > a && (s[b - 1] == ',' || s[b - 1] == ';')) b--;
    int r = py_float(s, a, b, out);
    if (r < 0) return -1;
    *has = r;
    return 0;
}

static PyObject *opt_float_obj(int has, double d) {
    if (!has) Py_RETURN_NONE;
    return PyFloat_FromDouble(d);
}

/* `:?\s*(?P<v>[^\s,]+)` at p, with the regex's backtracking: when the colon is followed by
 * nothing usable, the value is the colon itself. */
static int match_value(U *s, Py_ssize_t p, Py_ssize_t n, Py_ssize_t *va, Py_ssize_t *vb) {
    if (p < n && s[p] == ':') {
        Py_ssize_t q = skip_rs(s, p + 1, n);
        if (q < n && is_tok(s[q])) {
            *va = q;
            *vb = tok_end(s, q, n);
            return 1;
        }
        *va = p;
        *vb = tok_end(s, p, n);
        return 1;
    }
    Py_ssize_t q = skip_rs(s, p, n);
    if (q < n && is_tok(s[q])) {
        *va = q;
        *vb = tok_end(s, q, n);
        return 1;
    }
    return 0;
}

/* ---- _PREFIX / _strip_prefix ------------------------------------------------------------ */

static const char *LEVELS[] = {"VERBOSE", "INFO", "WARNING", "WARN", "ERROR", "DEBUG",
                               "INTERNAL_ERROR", "Verbose", "Info", "Warning", "Error",
                               "Debug", NULL};

/* One alternative of the prefix group at p; returns the end or -1. */
static Py_ssize_t prefix_alt(U *s, Py_ssize_t p, Py_ssize_t n) {
    if (p >= n) return -1;
    unsigned char c = s[p];
    if (c == '[') { /* \[[^\[\]\n]*\]\s* */
        Py_ssize_t q = p + 1;
        while (q < n && s[q] != '[' && s[q] != ']' && s[q] != '\n') q++;
        if (q < n && s[q] == ']') return skip_rs(s, q + 1, n);
        return -1;
    }
    if (c != 'V' && c != 'I' && c != 'W' && c != 'E' && c != 'D' && c != '(' && !is_digit(c) &&
        c != 'T')
        return -1; /* no alternative starts with anything else */
    for (int w = 0; LEVELS[w]; w++) { /* LEVEL(?:\s+TRT)?:\s* */
        if (LEVELS[w][0] != c || !startswith(s, p, n, LEVELS[w])) continue;
        Py_ssize_t q = p + (Py_ssize_t)strlen(LEVELS[w]);
        Py_ssize_t r = skip_rs(s, q, n);
        if (r > q && startswith(s, r, n, "TRT") && r + 3 < n && s[r + 3] == ':')
            return skip_rs(s, r + 4, n);
        if (q < n && s[q] == ':') return skip_rs(s, q + 1, n);
    }
    if (startswith(s, p, n, "(foreignNode)")) return skip_rs(s, p + 13, n);
    if (p + 10 < n && is_digit(s[p]) && is_digit(s[p + 1]) && is_digit(s[p + 2]) &&
        is_digit(s[p + 3]) && s[p + 4] == '-' && is_digit(s[p + 5]) && is_digit(s[p + 6]) &&
        s[p + 7] == '-' && is_digit(s[p + 8]) && is_digit(s[p + 9]) &&
        (s[p + 10] == ' ' || s[p + 10] == 'T')) {
        /* [0-9:.+\-]+:?\s+ : the run is maximal, then whitespace must follow */
        Py_ssize_t q = p + 11, r = q;
        while (r < n && (is_digit(s[r]) || s[r] == ':' || s[r] == '.' || s[r] == '+' || s[r] == '-'))
            r++;
        if (r > q && r < n && is_rs(s[r])) return skip_rs(s, r, n);
    }
    if (startswith(s, p, n, "TensorRT backend:")) return skip_rs(s, p + 17, n);
    return -1;
}

/* _strip_prefix on s[a:b]: the message span without logger prefixes, stripped */
static void strip_prefix(U *s, Py_ssize_t *a, Py_ssize_t *b) {
    Py_ssize_t p = skip_rs(s, *a, *b);
    for (;;) {
        Py_ssize_t q = prefix_alt(s, p, *b);
        if (q < 0) break;
        p = q;
    }
    *a = p;
    strip(s, a, b);
}

/* How to make a frozen dataclass instance without running its generated __init__ in
 * Python: object.__new__, then object.__setattr__ for every field in order (explicit
 * values first, then the defaults) -- what that __init__ does. Only used when the class
 * has no __post_init__ and plain fields with plain defaults; otherwise the class is called. */
#define MAX_FIELDS 16
typedef struct {
    PyObject *cls;
    int direct;  /* object.__new__ + object.__setattr__ per field */
    int slotted; /* @dataclass(slots=True): store straight into the slots */
    Py_ssize_t nfields;
    PyObject *names[MAX_FIELDS];
    PyObject *defaults[MAX_FIELDS]; /* NULL: required */
    Py_ssize_t offsets[MAX_FIELDS];  /* slot offsets when slotted */
} Maker;

static int maker_init(Maker *m, PyObject *cls) {
    memset(m, 0, sizeof(*m));
    m->cls = Py_NewRef(cls);
    PyObject *fields = PyObject_GetAttrString(cls, "__dataclass_fields__");
    if (!fields) {
        PyErr_Clear();
        return 0;
    }
    int ok = PyDict_Check(fields) && PyDict_GET_SIZE(fields) <= MAX_FIELDS &&
             !PyObject_HasAttrString(cls, "__post_init__");
    PyObject *missing = NULL;
    if (ok) {
        PyObject *dc = PyImport_ImportModule("dataclasses");
        missing = dc ? PyObject_GetAttrString(dc, "MISSING") : NULL;
        PyObject *plain = dc ? PyObject_GetAttrString(dc, "_FIELD") : NULL;
        Py_XDECREF(dc);
        if (!missing || !plain) {
            Py_XDECREF(plain);
            Py_XDECREF(missing);
            Py_DECREF(fields);
            return -1;
        }
        PyObject *key, *f;
        Py_ssize_t pos = 0;
        while (ok && PyDict_Next(fields, &pos, &key, &f)) {
            PyObject *ft = PyObject_GetAttrString(f, "_field_type");
            PyObject *factory = PyObject_GetAttrString(f, "default_factory");
            PyObject *def = PyObject_GetAttrString(f, "default");
            PyObject *init = PyObject_GetAttrString(f, "init");
            ok = ft == plain && factory == missing && def && init == Py_True &&
                 PyUnicode_Check(key);
            if (ok) {
                m->names[m->nfields] = Py_NewRef(key);
                m->defaults[m->nfields] = def == missing ? NULL : Py_NewRef(def);
                m->nfields++;
            }
            Py_XDECREF(ft);
            Py_XDECREF(factory);
            Py_XDECREF(def);
            Py_XDECREF(init);
        }
        Py_DECREF(plain);
        Py_DECREF(missing);
    }
    Py_DECREF(fields);
    PyErr_Clear();
    m->direct = ok;
    /* slots: every field a plain object member descriptor of this very class */
    PyTypeObject *t = (PyTypeObject *)cls;
    int slotted = ok && t->tp_dictoffset == 0 && t->tp_alloc == PyType_GenericAlloc;
    for (Py_ssize_t i = 0; slotted && i < m->nfields; i++) {
        PyObject *d = PyDict_GetItemWithError(t->tp_dict, m->names[i]);
        slotted = d && Py_IS_TYPE(d, &PyMemberDescr_Type) &&
                  ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX &&
                  !(((PyMemberDescrObject *)d)->d_member->flags & READONLY);
        if (slotted) m->offsets[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    PyErr_Clear();
    m->slotted = slotted;
    return 0;
}

static void maker_clear(Maker *m) {
    Py_CLEAR(m->cls);
    for (Py_ssize_t i = 0; i < m->nfields; i++) {
        Py_CLEAR(m->names[i]);
        Py_CLEAR(m->defaults[i]);
    }
    m->nfields = 0;
}

/* cls(*args) for n positional args */
static PyObject *make(Maker *m, PyObject *const *args, Py_ssize_t n) {
    if (!m->direct || n > m->nfields)
        return PyObject_Vectorcall(m->cls, args, (size_t)n, NULL);
    for (Py_ssize_t i = n; i < m->nfields; i++)
        if (m->defaults[i] == NULL) return PyObject_Vectorcall(m->cls, args, (size_t)n, NULL);
    if (m->slotted) {
        PyTypeObject *t = (PyTypeObject *)m->cls;
        PyObject *obj = t->tp_alloc(t, 0);
        if (!obj) return NULL;
        for (Py_ssize_t i = 0; i < m->nfields; i++)
            *(PyObject **)((char *)obj + m->offsets[i]) = Py_NewRef(i < n ? args[i] : m->defaults[i]);
        return obj;
    }
    PyObject *none = PyTuple_New(0);
    if (!none) return NULL;
    PyObject *obj = PyBaseObject_Type.tp_new((PyTypeObject *)m->cls, none, NULL);
    Py_DECREF(none);
    if (!obj) return NULL;
    for (Py_ssize_t i = 0; i < m->nfields; i++) {
        if (PyObject_GenericSetAttr(obj, m->names[i], i < n ? args[i] : m->defaults[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

static int append_steal(PyObject *list, PyObject *item) {
    if (!item) return -1;
    int r = PyList_Append(list, item);
    Py_DECREF(item);
    return r;
}

/* layerinfo.split_onnx_layers(s[a:b]) for ASCII text (Python's str.strip would also
 * remove Unicode spaces, so anything else goes to the Python function) */
static PyObject *split_onnx(PyObject *py_split, U *s, Py_ssize_t a, Py_ssize_t b) {
    if (!is_ascii(s, a, b)) {
        PyObject *text = mkstr(s, a, b);
        if (!text) return NULL;
        PyObject *r = PyObject_CallOneArg(py_split, text);
        Py_DECREF(text);
        return r;
    }
    PyObject *names = PyList_New(0);
    if (!names) return NULL;
    Py_ssize_t p = a;
    while (p <= b && b > a) {
        Py_ssize_t e = p;
        while (e < b && s[e] != 0x1e && s[e] != 0x1f) e++;
        Py_ssize_t x = p, y = e;
        strip(s, &x, &y);
        if (y > x) {
            if (y - x >= 14 && memcmp(s + x, "[ONNX Layer: ", 13) == 0 && s[y - 1] == ']') {
                x += 13;
                y -= 1;
            }
            if (append_steal(names, mkstr(s, x, y)) < 0) {
                Py_DECREF(names);
                return NULL;
            }
        }
        p = e + 1;
    }
    PyObject *t = PyList_AsTuple(names);
    Py_DECREF(names);
    return t;
}

/* ---- Candidate ----------------------------------------------------------------------------
 *
 * One timed tactic. Logs hold millions, and each used to be a NamedTuple plus its float and
 * int: a tuple subclass is made and freed through the generic heap-type paths. This is a
 * small fixed object instead: its fields are only ever None, int, float or str (checked on
 * construction), so it cannot be part of a reference cycle and is not tracked by the
 * collector. Attribute access, equality, hashing, repr, tactic_hex and to_json() behave as
 * the NamedTuple's did (logparse keeps that one where this module is not built). */

typedef struct {
    PyObject_HEAD
    PyObject *tactic_id, *kernel, *runner; /* never NULL */
    PyObject *cost_obj;                    /* an int given as cost_ms, else NULL */
    uint64_t hash_u64;                     /* tactic_hash, made into an int on access */
    double cost;                           /* cost_ms, made into a float on access */
    int has_cost;
} CandObject;

static PyTypeObject CandType;

#define CAND(o) ((CandObject *)(o))

/* freed candidates kept for reuse, as CPython keeps floats: the next ones are made in
 * memory that is still in cache */
#define CAND_FREE_MAX 4096
static CandObject *cand_free[CAND_FREE_MAX];
static int n_cand_free;

static void Cand_dealloc(CandObject *c) {
    Py_DECREF(c->tactic_id);
    Py_DECREF(c->kernel);
    Py_DECREF(c->runner);
    Py_XDECREF(c->cost_obj);
    if (n_cand_free < CAND_FREE_MAX) cand_free[n_cand_free++] = c;
    else PyObject_Free(c);
}

static CandObject *cand_alloc(void) {
    if (n_cand_free)
        return (CandObject *)PyObject_Init((PyObject *)cand_free[--n_cand_free], &CandType);
    return PyObject_New(CandObject, &CandType);
}

static PyObject *Cand_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"tactic_id", "tactic_hash", "kernel", "cost_ms", "runner", NULL};
    PyObject *tid, *th, *k, *cost, *runner = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO|O:Candidate", kwlist, &tid, &th, &k, &cost,
                                     &runner))
        return NULL;
    if ((tid != Py_None && !PyLong_CheckExact(tid)) || !PyLong_CheckExact(th) ||
        (k != Py_None && !PyUnicode_CheckExact(k)) ||
        (cost != Py_None && !PyFloat_CheckExact(cost) && !PyLong_CheckExact(cost)) ||
        (runner != Py_None && !PyUnicode_CheckExact(runner))) {
        PyErr_SetString(PyExc_TypeError,
                        "Candidate(tactic_id: int | None, tactic_hash: int, kernel: str | None, "
                        "cost_ms: float | None, runner: str | None = None)");
        return NULL;
    }
    unsigned long long h = PyLong_AsUnsignedLongLong(th);
    if (h == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "Candidate: tactic_hash must be in [0, 2**64)");
        return NULL;
    }
    CandObject *c = cand_alloc();
    if (!c) return NULL;
    c->tactic_id = Py_NewRef(tid);
    c->kernel = Py_NewRef(k);
    c->runner = Py_NewRef(runner);
    c->hash_u64 = h;
    c->has_cost = cost != Py_None;
    c->cost = PyFloat_CheckExact(cost) ? PyFloat_AS_DOUBLE(cost) : 0.0;
    c->cost_obj = PyLong_CheckExact(cost) ? Py_NewRef(cost) : NULL;
    return (PyObject *)c;
}

static PyObject *Cand_get_hash(CandObject *c, void *closure) {
    return PyLong_FromUnsignedLongLong(c->hash_u64);
}

static PyObject *Cand_get_cost(CandObject *c, void *closure) {
    if (!c->has_cost) Py_RETURN_NONE;
    if (c->cost_obj) return Py_NewRef(c->cost_obj);
    return PyFloat_FromDouble(c->cost);
}

static PyObject *Cand_fields(CandObject *c) {
    PyObject *h = Cand_get_hash(c, NULL), *cost = Cand_get_cost(c, NULL);
    PyObject *t = (h && cost) ? PyTuple_Pack(5, c->tactic_id, h, c->kernel, cost, c->runner) : NULL;
    Py_XDECREF(h);
    Py_XDECREF(cost);
    return t;
}

static PyObject *Cand_richcompare(PyObject *a, PyObject *b, int op) {
    if (!Py_IS_TYPE(a, &CandType) || !Py_IS_TYPE(b, &CandType) || (op != Py_EQ && op != Py_NE))
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *ta = Cand_fields(CAND(a)), *tb = Cand_fields(CAND(b));
    PyObject *r = (ta && tb) ? PyObject_RichCompare(ta, tb, op) : NULL;
    Py_XDECREF(ta);
    Py_XDECREF(tb);
    return r;
}

static Py_hash_t Cand_hash(CandObject *c) {
    PyObject *t = Cand_fields(c);
    if (!t) return -1;
    Py_hash_t h = PyObject_Hash(t);
    Py_DECREF(t);
    return h;
}

static PyObject *Cand_repr(CandObject *c) {
    PyObject *h = Cand_get_hash(c, NULL), *cost = Cand_get_cost(c, NULL);
    PyObject *r = (h && cost) ? PyUnicode_FromFormat(
                                    "Candidate(tactic_id=%R, tactic_hash=%R, kernel=%R, "
                                    "cost_ms=%R, runner=%R)",
                                    c->tactic_id, h, c->kernel, cost, c->runner)
                              : NULL;
    Py_XDECREF(h);
    Py_XDECREF(cost);
    return r;
}

static PyObject *Cand_tactic_hex(CandObject *c, void *closure) {
    char buf[32];
    snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)c->hash_u64);
    return PyUnicode_FromString(buf);
}

/* logparse._json_float: None unless a finite number */
static PyObject *json_float(PyObject *v) {
    if (PyFloat_Check(v) && !isfinite(PyFloat_AS_DOUBLE(v))) Py_RETURN_NONE;
    return Py_NewRef(v);
}

static PyObject *Cand_to_json(CandObject *c, PyObject *Py_UNUSED(ignored)) {
    PyObject *hex = Cand_tactic_hex(c, NULL), *raw = Cand_get_cost(c, NULL);
    PyObject *cost = raw ? json_float(raw) : NULL;
    PyObject *d = (hex && cost) ? Py_BuildValue("{sOsOsOsOsO}", "tactic_id", c->tactic_id,
                                                "tactic_hash", hex, "kernel", c->kernel,
                                                "cost_ms", cost, "runner", c->runner)
                                : NULL;
    Py_XDECREF(hex);
    Py_XDECREF(raw);
    Py_XDECREF(cost);
    return d;
}

static PyObject *Cand_reduce(CandObject *c, PyObject *Py_UNUSED(ignored)) {
    PyObject *t = Cand_fields(c);
    return t ? Py_BuildValue("(ON)", (PyObject *)Py_TYPE(c), t) : NULL;
}

static PyMemberDef Cand_members[] = {
    {"tactic_id", T_OBJECT, offsetof(CandObject, tactic_id), READONLY,
     "position in a sorted table (editable cache, Myelin); None elsewhere"},
    {"kernel", T_OBJECT, offsetof(CandObject, kernel), READONLY, "kernel name, if printed"},
    {"runner", T_OBJECT, offsetof(CandObject, runner), READONLY, "runner (8.6-10.x logs)"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Cand_getset[] = {
    {"tactic_hash", (getter)Cand_get_hash, NULL, "the tactic as TensorRT's unsigned 64-bit value",
     NULL},
    {"cost_ms", (getter)Cand_get_cost, NULL, "timing in ms, if readable", NULL},
    {"tactic_hex", (getter)Cand_tactic_hex, NULL, "the tactic hash as 0x-hex", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Cand_methods[] = {
    {"to_json", (PyCFunction)Cand_to_json, METH_NOARGS, "a JSON-ready dict"},
    {"__reduce__", (PyCFunction)Cand_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CandType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "reprobuild.logparse.Candidate",
    .tp_basicsize = sizeof(CandObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Candidate(tactic_id, tactic_hash, kernel, cost_ms, runner=None): one timed "
              "tactic. tactic_id exists only in sorted tables (editable/Myelin).",
    .tp_new = Cand_new,
    .tp_dealloc = (destructor)Cand_dealloc,
    .tp_richcompare = Cand_richcompare,
    .tp_hash = (hashfunc)Cand_hash,
    .tp_repr = (reprfunc)Cand_repr,
    .tp_members = Cand_members,
    .tp_getset = Cand_getset,
    .tp_methods = Cand_methods,
};

/* ---- parser state ----------------------------------------------------------------------- */

typedef struct {
    PyObject *runner; /* str or NULL */
    uint64_t tac;
    int has_cost;
    double cost;
} Fastest;

typedef struct {
    int open;
    PyObject *layer;   /* str */
    PyObject *formats; /* str or NULL */
    Py_ssize_t line;
    int reformat;
    PyObject *cands;  /* list */
    PyObject *runner; /* str or NULL */
    Fastest *fastest;
    Py_ssize_t nfastest, cap_fastest;
    PyObject *onnx; /* tuple */
} RunnerBlock;

typedef struct {
    int open;
    PyObject *name;
    PyObject *key; /* str or NULL */
    int keyed;
    PyObject *onnx;
    Py_ssize_t line;
    PyObject *cands;
    int has_sel, has_sel_cost, has_written;
    uint64_t sel, written;
    double sel_cost;
} OpBlock;

/* Where "Tactic" and "Layer" occur in the current line, found by the trigger scan: the
 * handlers' many "contains X Tactic Y" tests become fixed-offset compares at these
 * positions instead of fresh scans of the line (inspector lines run to kilobytes). */
#define MAX_OCC 32
typedef struct {
    U *line;
    Py_ssize_t tac[MAX_OCC], lay[MAX_OCC];
    int ntac, nlay, over; /* over: more than MAX_OCC of either; search instead */
    Py_ssize_t c0x;       /* the last ", 0x" (position in the line), or -1 */
} Occ;

typedef struct {
    PyObject_HEAD
    Occ occ;
    int occ_chose; /* the line contains "Chose Runner Type" */
    PyObject *parser, *rec_t, *warn_t, *layer_t, *split_onnx;
    Maker warn_m, layer_m, rec_m;
    Py_ssize_t max_warnings;
    Py_ssize_t lineno;
    PyObject *warnings; /* the parser's list */
    Py_ssize_t warnings_dropped;
    PyObject *engine_layers;
    PyObject *out;
    unsigned char *carry;
    Py_ssize_t carry_len, carry_cap;
    U *buf_end; /* end of the buffer holding the current line: vector loads may read up to it */
    RunnerBlock blk;
    OpBlock op;
    PyObject *orphans;
    PyObject *cur_layer, *set_layer;
    PyObject *meta_node, *meta_onnx; /* NULL when no metadata seen */
    int has_pending, pending_has_tac;
    PyObject *pending_kernel;
    uint64_t pending_tac;
    int legacy, layers_open, finished;
} Scanner;

static void blk_clear(RunnerBlock *b) {
    Py_CLEAR(b->layer);
    Py_CLEAR(b->formats);
    Py_CLEAR(b->cands);
    Py_CLEAR(b->runner);
    Py_CLEAR(b->onnx);
    for (Py_ssize_t i = 0; i < b->nfastest; i++) Py_CLEAR(b->fastest[i].runner);
    b->nfastest = 0;
    b->open = 0;
}

static void op_clear(OpBlock *o) {
    Py_CLEAR(o->name);
    Py_CLEAR(o->key);
    Py_CLEAR(o->onnx);
    Py_CLEAR(o->cands);
    o->open = 0;
}

static PyObject *empty_tuple(void) { return PyTuple_New(0); }

/* _RunnerBlock(layer, formats, line, kind); steals layer and formats */
static int blk_open(Scanner *S, PyObject *layer, PyObject *formats, int reformat) {
    RunnerBlock *b = &S->blk;
    blk_clear(b);
    b->layer = layer;
    b->formats = formats;
    b->line = S->lineno;
    b->reformat = reformat;
    b->cands = PyList_New(0);
    b->onnx = empty_tuple();
    b->open = 1;
    return (b->cands && b->onnx) ? 0 : -1;
}

/* a Candidate from the scanner's own values; steals ident and kernel */
static PyObject *new_candidate(PyObject *ident, uint64_t tac, PyObject *kernel,
                               int has_cost, double cost, PyObject *runner) {
    CandObject *c = cand_alloc();
    if (!c) {
        Py_XDECREF(ident);
        Py_XDECREF(kernel);
        return NULL;
    }
    c->tactic_id = ident ? ident : Py_NewRef(Py_None);
    c->kernel = kernel ? kernel : Py_NewRef(Py_None);
    c->runner = Py_NewRef(runner ? runner : Py_None);
    c->cost_obj = NULL;
    c->hash_u64 = tac;
    c->cost = cost;
    c->has_cost = has_cost;
    return (PyObject *)c;
}

static int emit_record(Scanner *S, PyObject *layer, PyObject *key, PyObject *onnx,
                       PyObject *cands, int has_chosen, uint64_t chosen, PyObject *kernel,
                       int has_cost, double cost, int from_cache, PyObject *runner,
                       Py_ssize_t line, PyObject *fmt, PyObject *formats) {
    PyObject *ch = has_chosen ? mkint(chosen) : Py_NewRef(Py_None);
    PyObject *co = opt_float_obj(has_cost, cost);
    PyObject *ln = PyLong_FromSsize_t(line);
    int r = -1;
    if (ch && co && ln) {
        PyObject *args[12] = {layer, key ? key : Py_None, onnx, cands, ch,
                              kernel ? kernel : Py_None, co, from_cache ? Py_True : Py_False,
                              runner ? runner : Py_None, ln, fmt, formats ? formats : Py_None};
        PyObject *rec = make(&S->rec_m, args, 12);
        if (rec) {
            r = PyList_Append(S->out, rec);
            Py_DECREF(rec);
        }
    }
    Py_XDECREF(ch);
    Py_XDECREF(co);
    Py_XDECREF(ln);
    S->layers_open = 0; /* _emit */
    return r;
}

static int cand_hash(PyObject *c, uint64_t *out) {
    /* our own non-negative ints below 2**64: the mask form is exact, and much cheaper */
    *out = CAND(c)->hash_u64;
    return 0;
}

static double cand_cost_key(PyObject *c) {
    return CAND(c)->has_cost ? CAND(c)->cost : Py_HUGE_VAL; /* scanner-made: floats */
}

/* _attach_meta */
static void attach_meta(Scanner *S) {
    RunnerBlock *b = &S->blk;
    if (S->meta_node && str_nonempty(b->layer) && PyUnicode_Compare(S->meta_node, b->layer) == 0) {
        Py_INCREF(S->meta_onnx);
        Py_SETREF(b->onnx, S->meta_onnx);
    }
}

/* _emit_runner_block; the block stays owned by the caller */
static int emit_runner_block(Scanner *S, RunnerBlock *b, int has_chosen, uint64_t chosen,
                             PyObject *runner) {
    PyObject *layer = str_nonempty(b->layer) ? b->layer : S->set_layer;
    if (!str_nonempty(layer)) return 0;
    PyObject *kernel = NULL;
    int has_cost = 0;
    double cost = 0;
    if (has_chosen) {
        PyObject *match = NULL;
        Py_ssize_t nc = PyList_GET_SIZE(b->cands);
        for (int pass = 0; pass < 2 && !match; pass++) {
            for (Py_ssize_t i = 0; i < nc; i++) {
                PyObject *c = PyList_GET_ITEM(b->cands, i);
                uint64_t h;
                if (cand_hash(c, &h) < 0) return -1;
                if (h == chosen && (pass == 1 || opt_eq(CAND(c)->runner, runner))) {
                    match = c;
                    break;
                }
            }
        }
        if (match) {
            kernel = CAND(match)->kernel;
            if (CAND(match)->has_cost) {
                has_cost = 1;
                cost = CAND(match)->cost;
            }
        }
        if (!has_cost) {
            for (Py_ssize_t i = 0; i < b->nfastest; i++) {
                if (b->fastest[i].tac == chosen) {
                    has_cost = b->fastest[i].has_cost;
                    cost = b->fastest[i].cost;
                    break;
                }
            }
        }
    }
    PyObject *fmt = b->reformat ? s_reformat : (S->legacy ? s_legacy : s_runner);
    return emit_record(S, layer, NULL, b->onnx, b->cands, has_chosen, chosen,
                       kernel == Py_None ? NULL : kernel, has_cost, cost, 0, runner, b->line, fmt,
                       b->formats);
}

/* self._blk = None, keeping the block for the caller to emit */
static RunnerBlock blk_take(Scanner *S) {
    RunnerBlock b = S->blk;
    memset(&S->blk, 0, sizeof(RunnerBlock));
    return b;
}

/* drop a taken block; its Fastest buffer goes back to the scanner for the next block */
static void blk_release(Scanner *S, RunnerBlock *b) {
    Fastest *fa = b->fastest;
    Py_ssize_t cap = b->cap_fastest;
    blk_clear(b);
    if (S->blk.fastest == NULL) {
        S->blk.fastest = fa;
        S->blk.cap_fastest = cap;
    } else {
        PyMem_Free(fa);
    }
}

/* _flush_blk */
static int flush_blk(Scanner *S) {
    if (!S->blk.open) return 0;
    RunnerBlock b = blk_take(S);
    int r = 0;
    if (b.reformat) {
        int has = 0;
        uint64_t chosen = 0;
        PyObject *runner = NULL;
        if (b.nfastest) {
            Py_ssize_t best = 0;
            for (Py_ssize_t i = 1; i < b.nfastest; i++) {
                double ki = b.fastest[i].has_cost ? b.fastest[i].cost : Py_HUGE_VAL;
                double kb = b.fastest[best].has_cost ? b.fastest[best].cost : Py_HUGE_VAL;
                if (ki < kb) best = i;
            }
            has = 1;
            chosen = b.fastest[best].tac;
            runner = b.fastest[best].runner;
        } else if (PyList_GET_SIZE(b.cands)) {
            Py_ssize_t best = 0;
            for (Py_ssize_t i = 1; i < PyList_GET_SIZE(b.cands); i++) {
                if (cand_cost_key(PyList_GET_ITEM(b.cands, i)) <
                    cand_cost_key(PyList_GET_ITEM(b.cands, best)))
                    best = i;
            }
            PyObject *c = PyList_GET_ITEM(b.cands, best);
            has = 1;
            if (cand_hash(c, &chosen) < 0) r = -1;
            runner = CAND(c)->runner;
            if (runner == Py_None) runner = NULL;
        }
        if (has && r == 0) r = emit_runner_block(S, &b, 1, chosen, runner);
    } else if (PyList_GET_SIZE(b.cands) || b.nfastest) {
        r = emit_runner_block(S, &b, 0, 0, NULL);
    }
    blk_release(S, &b);
    return r;
}

/* _flush_op */
static int flush_op(Scanner *S) {
    if (!S->op.open) return 0;
    OpBlock o = S->op;
    memset(&S->op, 0, sizeof(OpBlock));
    int has = 0, r = 0;
    uint64_t chosen = 0;
    if (o.has_sel) {
        has = 1;
        chosen = o.sel;
    } else if (o.has_written) {
        has = 1;
        chosen = o.written;
    } else if (!o.keyed && PyList_GET_SIZE(o.cands)) {
        has = 1;
        if (cand_hash(PyList_GET_ITEM(o.cands, 0), &chosen) < 0) r = -1;
    }
    if (r == 0 && !(!o.keyed && !has) && (str_nonempty(o.name) || o.key)) {
        PyObject *kernel = NULL;
        int has_cost = o.has_sel_cost;
        double cost = o.sel_cost;
        if (has) {
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(o.cands); i++) {
                PyObject *c = PyList_GET_ITEM(o.cands, i);
                uint64_t h;
                if (cand_hash(c, &h) < 0) {
                    r = -1;
                    break;
                }
                if (h == chosen) {
                    kernel = CAND(c)->kernel;
                    if (kernel == Py_None) kernel = NULL;
                    if (!has_cost && CAND(c)->has_cost) {
                        has_cost = 1;
                        cost = CAND(c)->cost;
                    }
                    break;
                }
            }
        }
        if (r == 0)
            r = emit_record(S, o.name, o.key, o.onnx, o.cands, has, chosen, kernel, has_cost, cost,
                            0, NULL, o.line, o.keyed ? s_editable : s_myelin, NULL);
    }
    op_clear(&o);
    return r;
}

/* _open_implicit; steals layer */
static int open_implicit(Scanner *S, PyObject *layer, int reformat) {
    if (!str_nonempty(layer)) {
        PyObject *alt = str_nonempty(S->cur_layer) ? S->cur_layer : S->set_layer;
        Py_INCREF(alt);
        Py_SETREF(layer, alt);
    }
    if (blk_open(S, layer, NULL, reformat) < 0) return -1;
    PyObject *fresh = PyList_New(0);
    if (!fresh) return -1;
    Py_SETREF(S->blk.cands, S->orphans);
    S->orphans = fresh;
    attach_meta(S);
    return 0;
}

static void clear_pending(Scanner *S) {
    S->has_pending = 0;
    Py_CLEAR(S->pending_kernel);
}

/* _candidate; steals kernel */
static int candidate(Scanner *S, uint64_t tac, U *s, Py_ssize_t ta, Py_ssize_t tb,
                     PyObject *kernel, int has_cost, double cost) {
    if (flush_op(S) < 0) {
        Py_XDECREF(kernel);
        return -1;
    }
    if (S->has_pending) {
        if (kernel == NULL && (!S->pending_has_tac || S->pending_tac == tac)) {
            kernel = S->pending_kernel;
            S->pending_kernel = NULL;
        }
        clear_pending(S);
    }
    if (!has_hex_prefix(s, ta, tb)) S->legacy = 1;
    PyObject *c = new_candidate(NULL, tac, kernel, has_cost, cost,
                                S->blk.open ? S->blk.runner : NULL);
    if (!c) return -1;
    if (S->blk.open) {
        if (PyList_GET_SIZE(S->blk.cands) < MAX_CANDIDATES) return append_steal(S->blk.cands, c);
        Py_DECREF(c);
        return 0;
    }
    if (PyList_GET_SIZE(S->orphans) >= MAX_ORPHANS &&
        PyList_SetSlice(S->orphans, 0, MAX_ORPHANS / 2, NULL) < 0) {
        Py_DECREF(c);
        return -1;
    }
    return append_steal(S->orphans, c);
}

/* ---- occurrences of "Tactic" / "Layer" --------------------------------------------------- */

/* The first occurrence of `word` (a position in s) at or after pos. */
ALWAYS_INLINE static Py_ssize_t occ_next(Scanner *S, U *s, Py_ssize_t n, int layer, Py_ssize_t pos) {
    if (S->occ.over) return find(s, pos, n, layer ? "Layer" : "Tactic");
    Py_ssize_t off = s - S->occ.line;
    const Py_ssize_t *v = layer ? S->occ.lay : S->occ.tac;
    int cnt = layer ? S->occ.nlay : S->occ.ntac;
    for (int k = 0; k < cnt; k++) {
        Py_ssize_t p = v[k] - off;
        if (p >= pos && p + (layer ? 5 : 6) <= n) return p;
    }
    return -1;
}

/* find(s, from, n, before + word + after) for word "Tactic" (layer=0) or "Layer" */
ALWAYS_INLINE static Py_ssize_t find_occ(Scanner *S, U *s, Py_ssize_t from, Py_ssize_t n, int layer,
                           const char *before, const char *after) {
    Py_ssize_t lb = (Py_ssize_t)strlen(before), la = (Py_ssize_t)strlen(after);
    Py_ssize_t w = layer ? 5 : 6;
    if (from < 0) from = 0;
    for (Py_ssize_t p = occ_next(S, s, n, layer, from + lb); p >= 0; p = occ_next(S, s, n, layer, p + 1)) {
        if (p + w + la <= n && memcmp(s + p - lb, before, (size_t)lb) == 0 &&
            memcmp(s + p + w, after, (size_t)la) == 0)
            return p - lb;
    }
    return -1;
}

/* rfind(s, 0, i, "Tactic Name: ") from the recorded "Tactic" positions */
static Py_ssize_t rfind_tac_name(Scanner *S, U *s, Py_ssize_t i) {
    if (S->occ.over || S->occ.line != s) return rfind(s, 0, i, "Tactic Name: ");
    for (int k = S->occ.ntac - 1; k >= 0; k--) {
        Py_ssize_t p = S->occ.tac[k];
        if (p + 13 <= i && memcmp(s + p + 6, " Name: ", 7) == 0) return p;
    }
    return -1;
}

#define FIND_TAC(s, from, n, before, after) find_occ(S, s, from, n, 0, before, after)
#define FIND_LAY(s, from, n, before, after) find_occ(S, s, from, n, 1, before, after)

/* ---- line handlers (return 1 handled, 0 not, -1 error) ----------------------------------- */

static int fastest_line(Scanner *S, U *s, Py_ssize_t n) {
    Py_ssize_t i = FIND_TAC(s, 0, n, "Fastest ", ": ");
    if (i < 0) return 0;
    /* _FASTEST_TAIL.match(line, i) */
    Py_ssize_t ta = i + 16, tb = tok_end(s, ta, n);
    if (tb == ta) return 0;
    Py_ssize_t w = skip_rs(s, tb, n);
    if (w == tb || !startswith(s, w, n, "Time")) return 0;
    Py_ssize_t va, vb;
    if (!match_value(s, w + 4, n, &va, &vb)) return 0;
    uint64_t tac;
    int r = tactic_to_int(s, ta, tb, &tac);
    if (r <= 0) return r;
    if (flush_op(S) < 0) return -1;
    /* _PROFILED.search(line, 0, i): greedy layer, i.e. the last " (" whose paren-free run
     * ends in ") profiling completed" inside [0, i) */
    PyObject *layer = Py_NewRef(empty_str), *runner = NULL;
    for (Py_ssize_t L = rfind(s, 0, i, " ("); L >= 0; L = rfind(s, 0, L + 1, " (")) {
        Py_ssize_t r2 = L + 2;
        while (r2 < i && s[r2] != '(' && s[r2] != ')') r2++;
        if (r2 < i && s[r2] == ')' && startswith(s, r2, i, ") profiling completed")) {
            Py_ssize_t la = 0, lb = L;
            strip_prefix(s, &la, &lb);
            Py_SETREF(layer, mkstr(s, la, lb));
            Py_ssize_t ra = L + 2, rb = r2;
            Py_ssize_t br = find(s, ra, rb, "[");
            if (br >= 0) rb = br;
            strip(s, &ra, &rb);
            if (rb > ra) runner = mkstr(s, ra, rb);
            if (!layer || (rb > ra && !runner)) {
                Py_XDECREF(layer);
                return -1;
            }
            break;
        }
        if (L == 0) break;
    }
    if (!S->blk.open) {
        Py_INCREF(layer);
        if (open_implicit(S, layer, 0) < 0) {
            Py_DECREF(layer);
            Py_XDECREF(runner);
            return -1;
        }
    }
    RunnerBlock *b = &S->blk;
    if (str_nonempty(layer) && !str_nonempty(b->layer)) {
        Py_INCREF(layer);
        Py_SETREF(b->layer, layer);
        attach_meta(S);
    }
    Py_DECREF(layer);
    if (runner == NULL && b->runner) runner = Py_NewRef(b->runner);
    if (b->nfastest == b->cap_fastest) {
        Py_ssize_t cap = b->cap_fastest ? b->cap_fastest * 2 : 16;
        Fastest *nf = PyMem_Realloc(b->fastest, (size_t)cap * sizeof(Fastest));
        if (!nf) {
            Py_XDECREF(runner);
            PyErr_NoMemory();
            return -1;
        }
        b->fastest = nf;
        b->cap_fastest = cap;
    }
    Fastest *f = &b->fastest[b->nfastest++];
    f->runner = runner;
    f->tac = tac;
    if (opt_float(s, va, vb, &f->has_cost, &f->cost) < 0) return -1;
    return 1;
}

static int chose_line(Scanner *S, U *s, Py_ssize_t n) {
    /* _CHOSE.search: "Chose Runner Type: " runner(.+?) " Tactic: " tac([^\s,]+) */
    Py_ssize_t ra = -1, rb = -1, ta = -1, tb = -1;
    for (Py_ssize_t p = find(s, 0, n, "Chose Runner Type: "); p >= 0 && ra < 0;
         p = find(s, p + 1, n, "Chose Runner Type: ")) {
        for (Py_ssize_t e = FIND_TAC(s, p + 20, n, " ", ": "); e >= 0; e = FIND_TAC(s, e + 1, n, " ", ": ")) {
            Py_ssize_t q = tok_end(s, e + 9, n);
            if (q > e + 9) {
                ra = p + 19, rb = e, ta = e + 9, tb = q;
                break;
            }
        }
    }
    if (ra < 0) return 0;
    uint64_t tac;
    int r = tactic_to_int(s, ta, tb, &tac);
    if (r <= 0) return r;
    if (flush_op(S) < 0) return -1;
    if (!S->blk.open && open_implicit(S, Py_NewRef(empty_str), 0) < 0) return -1;
    if (!has_hex_prefix(s, ta, tb)) S->legacy = 1;
    PyObject *runner = strip_str(s, ra, rb);
    if (!runner) return -1;
    RunnerBlock b = blk_take(S);
    r = emit_runner_block(S, &b, 1, tac, runner);
    Py_DECREF(runner);
    blk_release(S, &b);
    return r < 0 ? -1 : 1;
}

static int set_tactic_line(Scanner *S, U *line, Py_ssize_t n0) {
    Py_ssize_t a = 0, b = n0;
    strip_prefix(line, &a, &b);
    U *s = line + a;
    Py_ssize_t n = b - a;
    /* _SET_TACTIC.match: the shortest layer after which \s*, an optional "(...)\s*", and
     * "Set Tactic Name: " follow */
    Py_ssize_t L = -1, P = -1, ws_end = -1;
    for (Py_ssize_t l = 0; l <= n && L < 0; l++) {
        Py_ssize_t w;
        if (l < ws_end && is_rs(s[l])) {
            w = ws_end;
        } else {
            w = skip_rs(s, l, n);
            if (w > l) ws_end = w;
        }
        if (w < n && s[w] == '(') {
            Py_ssize_t r = w + 1;
            while (r < n && s[r] != '(' && s[r] != ')') r++;
            if (r < n && s[r] == ')') {
                Py_ssize_t w2 = skip_rs(s, r + 1, n);
                if (startswith(s, w2, n, "Set Tactic Name: ")) {
                    L = l;
                    P = w2;
                    break;
                }
            }
        }
        if (startswith(s, w, n, "Set Tactic Name: ")) {
            L = l;
            P = w;
        }
    }
    if (L < 0) return 0;
    Py_ssize_t q = P + 17;
    /* k = .*? then an optional " Tactic: tac" then \s*$ */
    Py_ssize_t t = n;
    while (t > q && is_rs(s[t - 1])) t--;
    Py_ssize_t ke = t, ta = -1, tb = -1;
    for (Py_ssize_t e = FIND_TAC(s, q, n, " ", ": "); e >= 0 && e < t; e = FIND_TAC(s, e + 1, n, " ", ": ")) {
        Py_ssize_t x = tok_end(s, e + 9, n);
        if (x > e + 9 && skip_rs(s, x, n) == n) {
            ke = e, ta = e + 9, tb = x;
            break;
        }
    }
    if (flush_op(S) < 0) return -1;
    uint64_t tac = 0;
    int has_tac = 0;
    if (ta >= 0) {
        has_tac = tactic_to_int(s, ta, tb, &tac);
        if (has_tac < 0) return -1;
    }
    PyObject *k = strip_str(s, q, ke);
    if (!k) return -1;
    clear_pending(S);
    S->has_pending = 1;
    S->pending_kernel = k;
    S->pending_has_tac = has_tac;
    S->pending_tac = tac;
    if (L > 0) {
        PyObject *layer = strip_str(s, 0, L);
        if (!layer) return -1;
        Py_SETREF(S->set_layer, layer);
    }
    S->legacy = 1;
    return 1;
}

static int layer_line(Scanner *S, U *line, Py_ssize_t n0);
static int oneline(Scanner *S, U *line, Py_ssize_t n0);

/* _CAND.search */
static int cand_search(Scanner *S, U *s, Py_ssize_t n, Py_ssize_t *ka, Py_ssize_t *kb, Py_ssize_t *ta,
                       Py_ssize_t *tb, Py_ssize_t *va, Py_ssize_t *vb) {
    for (Py_ssize_t i = FIND_TAC(s, 0, n, "", ""); i >= 0; i = FIND_TAC(s, i + 1, n, "", "")) {
        /* "Tactic: " tac " " (Time|time) :?\s* value */
        for (int opt = 1; opt >= 0; opt--) {
            if (opt) {
                if (!startswith(s, i, n, "Tactic Name: ")) continue;
                for (Py_ssize_t e = FIND_TAC(s, i + 14, n, " ", ": "); e >= 0;
                     e = FIND_TAC(s, e + 1, n, " ", ": ")) {
                    Py_ssize_t p = e + 9, q = p;
                    if (startswith(s, p, n, "0x")) {
                        q = p + 2;
                        while (q < n && is_hex(s[q])) q++;
                        if (q == p + 2 || q >= n || s[q] != ' ') q = p; /* alternative 2 */
                    }
                    if (q == p) {
                        Py_ssize_t d = p + (p < n && s[p] == '-');
                        q = d;
                        while (q < n && is_digit(s[q])) q++;
                        if (q == d || q >= n || s[q] != ' ') continue;
                    }
                    if (!startswith(s, q + 1, n, "Time") && !startswith(s, q + 1, n, "time"))
                        continue;
                    if (!match_value(s, q + 5, n, va, vb)) continue;
                    *ka = i + 13, *kb = e, *ta = p, *tb = q;
                    return 1;
                }
            } else {
                if (!startswith(s, i, n, "Tactic: ")) continue;
                Py_ssize_t p = i + 8, q = p;
                if (startswith(s, p, n, "0x")) {
                    q = p + 2;
                    while (q < n && is_hex(s[q])) q++;
                    if (q == p + 2 || q >= n || s[q] != ' ') q = p;
                }
                if (q == p) {
                    Py_ssize_t d = p + (p < n && s[p] == '-');
                    q = d;
                    while (q < n && is_digit(s[q])) q++;
                    if (q == d || q >= n || s[q] != ' ') continue;
                }
                if (!startswith(s, q + 1, n, "Time") && !startswith(s, q + 1, n, "time")) continue;
                if (!match_value(s, q + 5, n, va, vb)) continue;
                *ka = *kb = -1, *ta = p, *tb = q;
                return 1;
            }
        }
    }
    return 0;
}

/* _tactic_family */
static int tactic_family(Scanner *S, U *s, Py_ssize_t n) {
    Py_ssize_t i = FIND_TAC(s, 0, n, "", ": ");
    if (i >= 0) {
        Py_ssize_t j = find(s, i, n, " Time: ");
        if (j > 0 && !(i >= 8 && memcmp(s + i - 8, "Fastest ", 8) == 0)) {
            Py_ssize_t ta = i + 8, tb = j;
            IntVal v;
            if (ta > tb) ta = tb;
            if (parse_int(s, ta, tb, startswith(s, ta, tb, "0x") ? 16 : 10, &v) < 0) return -1;
            uint64_t tac;
            if (as_u64(&v, &tac)) {
                PyObject *kernel = NULL;
                Py_ssize_t k = rfind_tac_name(S, s, i);
                if (k >= 0) {
                    Py_ssize_t a = k + 13, b = i;
                    strip(s, &a, &b);
                    if (b > a && !(kernel = mkstr(s, a, b))) return -1;
                }
                double cost = 0;
                int has_cost = py_float(s, j + 7, n, &cost);
                if (has_cost < 0) {
                    Py_XDECREF(kernel);
                    return -1;
                }
                if (!has_cost) { /* the first word of the tail */
                    Py_ssize_t a = j + 7;
                    while (a < n && is_ws(s[a])) a++;
                    Py_ssize_t b = a;
                    while (b < n && !is_ws(s[b])) b++;
                    if (b > a && opt_float(s, a, b, &has_cost, &cost) < 0) {
                        Py_XDECREF(kernel);
                        return -1;
                    }
                }
                if (S->blk.open && !S->op.open && !S->has_pending) {
                    if (!(tb - ta >= 2 && s[ta + 1] == 'x')) S->legacy = 1;
                    if (PyList_GET_SIZE(S->blk.cands) < MAX_CANDIDATES) {
                        PyObject *c = new_candidate(NULL, tac, kernel, has_cost, cost, S->blk.runner);
                        if (append_steal(S->blk.cands, c) < 0) return -1;
                    } else {
                        Py_XDECREF(kernel);
                    }
                    return 1;
                }
                if (candidate(S, tac, s, ta, tb, kernel, has_cost, cost) < 0) return -1;
                return 1;
            }
        }
    }
    if (FIND_TAC(s, 0, n, "Fastest ", "") >= 0) return fastest_line(S, s, n);
    if (S->occ_chose) return chose_line(S, s, n);
    if (FIND_TAC(s, 0, n, "Set ", " Name") >= 0) return set_tactic_line(S, s, n);
    if (FIND_LAY(s, 0, n, "", "(") >= 0) return layer_line(S, s, n);
    if (FIND_LAY(s, 0, n, "", "Type: ") >= 0) return oneline(S, s, n);
    Py_ssize_t ka, kb, ta, tb, va, vb;
    if (!cand_search(S, s, n, &ka, &kb, &ta, &tb, &va, &vb)) return 0;
    uint64_t tac;
    int r = tac_tok(s, ta, tb, &tac);
    if (r <= 0) return r;
    PyObject *kernel = NULL;
    if (ka >= 0 && !(kernel = mkstr(s, ka, kb))) return -1;
    int has_cost;
    double cost;
    if (opt_float(s, va, vb, &has_cost, &cost) < 0) {
        Py_XDECREF(kernel);
        return -1;
    }
    if (candidate(S, tac, s, ta, tb, kernel, has_cost, cost) < 0) return -1;
    return 1;
}

/* _row: "<id>, <cost>, <ratio>, <correlation>, <kernel>, 0x<hash>, [<tunable>]" */
static int row_line(Scanner *S, U *s, Py_ssize_t n) {
    /* rfind(", 0x"): the scan recorded it (row_line only runs on the scanned line) */
    Py_ssize_t h = (S->occ.line == s && S->occ.c0x >= 0) ? S->occ.c0x : rfind(s, 0, n, ", 0x");
    Py_ssize_t e = find(s, h + 2, n, ",");
    if (e < 0) return 0;
    /* line[:h].rsplit(",", 4) */
    Py_ssize_t cut[4];
    Py_ssize_t p = h;
    for (int k = 0; k < 4; k++) {
        U *c = p > 0 ? memrchr(s, ',', (size_t)p) : NULL;
        if (!c) return 0;
        cut[k] = p = c - s;
    }
    /* parts[0] = [0, cut[3]), parts[1] = (cut[3], cut[2]), parts[4] = (cut[0], h) */
    IntVal tv, iv;
    if (parse_int(s, h + 2, e, 16, &tv) < 0) return -1;
    if (!tv.ok) return 0;
    Py_ssize_t sp = rfind(s, 0, cut[3], " ");
    if (parse_int(s, sp + 1, cut[3], 10, &iv) < 0) return -1;
    if (!iv.ok) return 0;
    double cost;
    int fr = py_float(s, cut[3] + 1, cut[2], &cost);
    if (fr <= 0) return fr;
    uint64_t tac;
    if (!as_u64(&tv, &tac) || iv.neg) return 0;
    if (S->op.open && PyList_GET_SIZE(S->op.cands) < MAX_CANDIDATES) {
        PyObject *ident;
        if (!iv.big) {
            ident = mkint(iv.mag);
        } else {
            PyObject *text = mkstr(s, sp + 1, cut[3]);
            if (!text) return -1;
            ident = PyLong_FromUnicodeObject(text, 10);
            Py_DECREF(text);
        }
        if (!ident) return -1;
        Py_ssize_t ka = cut[0] + 1, kb = h;
        strip(s, &ka, &kb);
        PyObject *kernel = NULL;
        if (kb > ka && !(kernel = mkstr(s, ka, kb))) {
            Py_DECREF(ident);
            return -1;
        }
        PyObject *c = new_candidate(ident, tac, kernel, 1, cost, NULL);
        if (append_steal(S->op.cands, c) < 0) return -1;
    }
    return 1;
}

/* _op_header(rest) with rest = line[a:n] */
static int op_header(Scanner *S, U *s, Py_ssize_t a, Py_ssize_t n) {
    strip(s, &a, &n);
    PyObject *name = NULL, *key = NULL, *onnx = NULL;
    int keyed = 0;
    Py_ssize_t sa = 0, sb = 0; /* suffix */
    /* _OP_KEYED: the last "(key: " with a ")" after it */
    Py_ssize_t N = -1, R = -1;
    for (Py_ssize_t k = rfind(s, a, n, "(key: "); k >= 0; k = rfind(s, a, k + 5, "(key: ")) {
        Py_ssize_t r = find(s, k + 6, n, ")");
        if (r >= 0) {
            N = k;
            R = r;
            break;
        }
        if (k == a) break;
    }
    if (N >= 0) {
        keyed = 1;
        Py_ssize_t p = skip_rs(s, R + 1, n);
        if (p < n && s[p] == ':') p++;
        p = skip_rs(s, p, n);
        Py_ssize_t na = a, nb = N;
        strip(s, &na, &nb);
        name = mkstr(s, na, nb);
        sa = p, sb = n;
        strip(s, &sa, &sb);
        Py_ssize_t ka = N + 6, kb = R;
        strip(s, &ka, &kb);
        if (kb - ka == 34 && s[ka] == '0' && (s[ka + 1] == 'x' || s[ka + 1] == 'X')) {
            int ok = 1;
            for (Py_ssize_t x = ka + 2; x < kb; x++) ok &= is_hex(s[x]);
            if (ok) {
                char buf[34];
                for (Py_ssize_t x = 0; x < 34; x++) buf[x] = (char)lower(s[ka + x]);
                key = PyUnicode_FromStringAndSize(buf, 34);
                if (!key) {
                    Py_XDECREF(name);
                    return -1;
                }
            }
        }
    } else {
        Py_ssize_t p = find(s, a, n, ": [");
        if (p >= 0) {
            Py_ssize_t na = a, nb = p;
            strip(s, &na, &nb);
            name = mkstr(s, na, nb);
            sa = p + 2, sb = n;
            strip(s, &sa, &sb);
        } else {
            Py_ssize_t nb = n;
            while (nb > a && s[nb - 1] == ':') nb--;
            Py_ssize_t na = a;
            strip(s, &na, &nb);
            name = mkstr(s, na, nb);
        }
    }
    if (!name) {
        Py_XDECREF(key);
        return -1;
    }
    if (sb > sa && s[sa] == '[') {
        onnx = split_onnx(S->split_onnx, s, sa, sb);
    } else {
        onnx = empty_tuple();
    }
    if (!onnx || flush_op(S) < 0) {
        Py_DECREF(name);
        Py_XDECREF(key);
        Py_XDECREF(onnx);
        return -1;
    }
    OpBlock *o = &S->op;
    o->name = name;
    o->key = key;
    o->keyed = keyed;
    o->onnx = onnx;
    o->line = S->lineno;
    o->cands = PyList_New(0);
    o->has_sel = o->has_sel_cost = o->has_written = 0;
    o->open = 1;
    return o->cands ? 1 : -1;
}

static int autotuning_line(Scanner *S, U *s, Py_ssize_t n) {
    Py_ssize_t i = find(s, 0, n, "Autotuning op ");
    if (i >= 0) return op_header(S, s, i + 14, n);
    int reformat = 0;
    Py_ssize_t a;
    i = find(s, 0, n, "Autotuning format combination");
    if (i < 0) {
        i = find(s, 0, n, "Autotuning Reformat");
        if (i < 0) return 0;
        reformat = 1;
        a = i + 19;
    } else {
        a = i + 29; /* line[i + 30:]: one character after "combination" */
        if (a < n) a += utf8_char_len(s + a, n - a);
    }
    Py_ssize_t b = n;
    strip(s, &a, &b);
    while (a < b && s[a] == ':') a++;
    strip(s, &a, &b);
    while (b > a && s[b - 1] == '*') b--;
    strip(s, &a, &b);
    PyObject *formats = NULL;
    if (b > a && !(formats = mkstr(s, a, b))) return -1;
    if (flush_op(S) < 0 || flush_blk(S) < 0 || PyList_SetSlice(S->orphans, 0, PY_SSIZE_T_MAX, NULL) < 0) {
        Py_XDECREF(formats);
        return -1;
    }
    clear_pending(S);
    PyObject *layer = reformat ? Py_NewRef(empty_str) : Py_NewRef(S->cur_layer);
    if (blk_open(S, layer, formats, reformat) < 0) return -1;
    attach_meta(S);
    return 1;
}

static int timing_runner_line(Scanner *S, U *s, Py_ssize_t n) {
    Py_ssize_t i = find(s, 0, n, "Timing Runner: ");
    if (i < 0) return 0;
    Py_ssize_t a = i + 15, b = n;
    strip(s, &a, &b);
    PyObject *layer, *runner = NULL;
    /* _RUNNER_TAIL.match(rest): rest ends in ')' (after \s*), and the last paren before it
     * is a '(' preceded by a space */
    Py_ssize_t e = b;
    while (e > a && is_rs(s[e - 1])) e--;
    Py_ssize_t L = -1, close = e - 1;
    if (e > a && s[close] == ')') {
        Py_ssize_t p = close - 1;
        while (p >= a && s[p] != '(' && s[p] != ')') p--;
        if (p > a && s[p] == '(' && s[p - 1] == ' ') L = p - 1;
    }
    if (L >= 0) {
        Py_ssize_t la = a, lb = L;
        strip(s, &la, &lb);
        layer = mkstr(s, la, lb);
        Py_ssize_t ra = L + 2, rb = close;
        Py_ssize_t br = find(s, ra, rb, "[");
        if (br >= 0) rb = br;
        strip(s, &ra, &rb);
        if (rb > ra && !(runner = mkstr(s, ra, rb))) {
            Py_XDECREF(layer);
            return -1;
        }
    } else {
        layer = mkstr(s, a, b);
    }
    if (!layer || flush_op(S) < 0) {
        Py_XDECREF(layer);
        Py_XDECREF(runner);
        return -1;
    }
    if (!S->blk.open) {
        Py_ssize_t len;
        const char *u = PyUnicode_AsUTF8AndSize(layer, &len);
        int reformat = u && len >= 18 && memcmp(u, "Optimizer Reformat", 18) == 0;
        if (open_implicit(S, Py_NewRef(layer), reformat) < 0) {
            Py_DECREF(layer);
            Py_XDECREF(runner);
            return -1;
        }
    }
    RunnerBlock *blk = &S->blk;
    if (!str_nonempty(blk->layer)) {
        Py_INCREF(layer);
        Py_SETREF(blk->layer, layer);
        attach_meta(S);
    }
    Py_DECREF(layer);
    if (!blk->reformat && !str_nonempty(S->cur_layer)) {
        Py_INCREF(blk->layer);
        Py_SETREF(S->cur_layer, blk->layer);
    }
    Py_XSETREF(blk->runner, runner);
    clear_pending(S);
    return 1;
}

static int computing_costs_line(Scanner *S, U *s, Py_ssize_t n) {
    Py_ssize_t i = find(s, 0, n, "Computing costs for");
    PyObject *name = strip_str(s, i + 19, n);
    if (!name) return -1;
    if (flush_op(S) < 0 || flush_blk(S) < 0 || PyList_SetSlice(S->orphans, 0, PY_SSIZE_T_MAX, NULL) < 0) {
        Py_DECREF(name);
        return -1;
    }
    Py_SETREF(S->cur_layer, name);
    Py_INCREF(empty_str);
    Py_SETREF(S->set_layer, empty_str);
    clear_pending(S);
    return 1;
}

static int selected_line(Scanner *S, U *s, Py_ssize_t n) {
    /* _SELECTED.search */
    for (Py_ssize_t p = find(s, 0, n, "(tactic hash, cost(in ms)):"); p >= 0;
         p = find(s, p + 1, n, "(tactic hash, cost(in ms)):")) {
        Py_ssize_t ta = skip_rs(s, p + 27, n), tb = tok_end(s, ta, n);
        if (tb == ta) continue;
        if (!S->op.open) return 1;
        Py_ssize_t q = skip_rs(s, tb, n), va = -1, vb = -1;
        if (q < n && s[q] == ',') {
            Py_ssize_t w = skip_rs(s, q + 1, n), x = tok_end(s, w, n);
            if (x > w) va = w, vb = x;
        }
        uint64_t tac;
        int r = tactic_to_int(s, ta, tb, &tac);
        if (r < 0) return -1;
        if (r) {
            S->op.has_sel = 1;
            S->op.sel = tac;
            if (va >= 0) {
                if (opt_float(s, va, vb, &S->op.has_sel_cost, &S->op.sel_cost) < 0) return -1;
            } else {
                S->op.has_sel_cost = 0;
            }
        }
        return 1;
    }
    return 1;
}

static int warn(Scanner *S, PyObject *kind, U *s, Py_ssize_t n) {
    if (PyList_GET_SIZE(S->warnings) >= S->max_warnings) {
        S->warnings_dropped++;
        return 0;
    }
    Py_ssize_t a = 0, b = n;
    strip_prefix(s, &a, &b);
    PyObject *msg = mkstr(s, a, b);
    if (!msg) return -1;
    PyObject *ln = PyLong_FromSsize_t(S->lineno);
    PyObject *w = NULL;
    if (ln) {
        PyObject *args[3] = {ln, kind, msg};
        w = make(&S->warn_m, args, 3);
        Py_DECREF(ln);
    }
    Py_DECREF(msg);
    return append_steal(S->warnings, w);
}

/* "[Cc]ache.*Error Code \d+|Error Code \d+.*[Cc]ache" */
static int cache_error(U *s, Py_ssize_t n) {
    Py_ssize_t first_cache = -1, last_cache = -1, first_err = -1, last_err = -1;
    for (Py_ssize_t p = find(s, 1, n, "ache"); p >= 0; p = find(s, p + 1, n, "ache")) {
        if (s[p - 1] == 'C' || s[p - 1] == 'c') {
            if (first_cache < 0) first_cache = p - 1;
            last_cache = p - 1;
        }
    }
    if (first_cache < 0) return 0;
    for (Py_ssize_t p = find(s, 0, n, "Error Code "); p >= 0; p = find(s, p + 1, n, "Error Code ")) {
        if (p + 11 < n && is_digit(s[p + 11])) {
            if (first_err < 0) first_err = p;
            last_err = p;
        }
    }
    if (first_err < 0) return 0;
    return first_cache + 5 <= last_err || last_cache >= first_err + 12;
}

static int at(U *s, Py_ssize_t i, Py_ssize_t n, const char *lit) {
    Py_ssize_t m = (Py_ssize_t)strlen(lit);
    return i >= 0 && i + m <= n && memcmp(s + i, lit, (size_t)m) == 0;
}

/* start of the maximal run of ASCII digits ending just before `end`, or -1 if empty */
static Py_ssize_t digits_back(U *s, Py_ssize_t end) {
    Py_ssize_t d = end;
    while (d > 0 && is_digit(s[d - 1])) d--;
    return d < end ? d : -1;
}

/* The _WARNINGS table, first pattern that matches anywhere. Every pattern contains
 * "cache" in some case, so each is checked as fixed text around the occurrences cs[] of
 * "cache" (any case; the re.I patterns are compared with ci_at). */
static PyObject *warning_kind_at(U *s, Py_ssize_t n, const Py_ssize_t *cs, int nc) {
    int k;
#define EACH for (k = 0; k < nc; k++)
    EACH if (at(s, cs[k], n, "Cache result detected as invalid")) return k_invalid;
    EACH if (at(s, cs[k] - 14, n, "nvalid timing cache") && cs[k] >= 15 &&
             (s[cs[k] - 15] == 'I' || s[cs[k] - 15] == 'i')) return k_invalid;
    EACH if (cs[k] >= 7 && ci_at(s, cs[k] - 7, n, "timing cache will not be used")) return k_not_used;
    EACH if ((cs[k] >= 15 && ci_at(s, cs[k] - 15, n, "could not read ")) ||
             (cs[k] >= 22 && ci_at(s, cs[k] - 22, n, "could not read timing ")))
        return k_not_used;
    if (cache_error(s, n)) return k_error;
    EACH if (cs[k] >= 7 && ci_at(s, cs[k] - 7, n, "timing cache miss")) return k_miss;
    EACH {
        Py_ssize_t q = cs[k] - 7;
        if (q < 0 || !ci_at(s, q, n, "timing ")) continue;
        for (int the = 0; the < 2; the++) {
            Py_ssize_t r = q - (the ? 14 : 10);
            if (r < 0 || !ci_at(s, r, n, the ? " bytes of the " : " bytes of ")) continue;
            Py_ssize_t d = digits_back(s, r);
            if (d >= 7 && ci_at(s, d - 7, n, "loaded ")) return k_loaded;
        }
    }
    EACH if (cs[k] >= 22 && ci_at(s, cs[k] - 22, n, "using existing timing cache")) return k_loaded;
    EACH if (at(s, cs[k] - 14, n, "Global timing cache in use")) return k_in_use;
    EACH if (at(s, cs[k] - 13, n, "Local timing cache in use")) return k_local;
    EACH if (at(s, cs[k] - 8, n, " timing cache entries")) {
        Py_ssize_t d = digits_back(s, cs[k] - 8);
        if (d >= 0 && at(s, d - 11, n, "Serialized ")) return k_serialized;
    }
    EACH if (at(s, cs[k] - 17, n, " bytes of timing cache")) {
        Py_ssize_t d = digits_back(s, cs[k] - 17);
        if (d >= 0 && at(s, d - 6, n, "Saved ")) return k_serialized;
    }
#undef EACH
    return NULL;
}

/* the next "cache" in any case at or after p (re.I with re.A folds ASCII letters only):
 * positions where (byte | 0x20) spells "ca", sixteen at a time, then compared in full */
static Py_ssize_t ci_cache(U *s, Py_ssize_t p, Py_ssize_t n) {
#ifdef __SSE2__
    const __m128i low = _mm_set1_epi8(0x20), c = _mm_set1_epi8('c'), a = _mm_set1_epi8('a');
    for (; p + 17 <= n; p += 16) {
        __m128i x = _mm_or_si128(_mm_loadu_si128((const __m128i *)(s + p)), low);
        __m128i y = _mm_or_si128(_mm_loadu_si128((const __m128i *)(s + p + 1)), low);
        unsigned mask = (unsigned)_mm_movemask_epi8(
            _mm_and_si128(_mm_cmpeq_epi8(x, c), _mm_cmpeq_epi8(y, a)));
        while (mask) {
            int b = __builtin_ctz(mask);
            if (ci_at(s, p + b, n, "cache")) return p + b;
            mask &= mask - 1;
        }
    }
#endif
    for (; p + 5 <= n; p++)
        if ((s[p] | 0x20) == 'c' && ci_at(s, p, n, "cache")) return p;
    return -1;
}

static PyObject *warning_kind(U *s, Py_ssize_t n) {
    Py_ssize_t cs_stack[16], *cs = cs_stack, cap = 16;
    int nc = 0, oom = 0;
    for (Py_ssize_t c = ci_cache(s, 0, n); c >= 0; c = ci_cache(s, c + 1, n)) {
        if (nc == cap) {
            Py_ssize_t *grown = PyMem_Malloc((size_t)cap * 2 * sizeof(Py_ssize_t));
            if (!grown) {
                oom = 1;
                break;
            }
            memcpy(grown, cs, (size_t)nc * sizeof(Py_ssize_t));
            if (cs != cs_stack) PyMem_Free(cs);
            cs = grown;
            cap *= 2;
        }
        cs[nc++] = c;
    }
    PyObject *kind = (!oom && nc) ? warning_kind_at(s, n, cs, nc) : NULL;
    if (cs != cs_stack) PyMem_Free(cs);
    return oom ? PyErr_NoMemory() : kind;
}

/* _cached */
static int cached_line(Scanner *S, U *line, Py_ssize_t n0) {
    Py_ssize_t a0 = 0, b0 = n0;
    strip_prefix(line, &a0, &b0);
    U *s = line + a0;
    Py_ssize_t n = b0 - a0;
    Py_ssize_t i = find(s, 0, n, "got cached result");
    /* i == -1 keeps Python's slicing: s[16:] and s[:-1] */
    Py_ssize_t t = i + 17;
    if (t > n) t = n;
    while (t < n && s[t] == ':') t++;
    /* _CACHED_TAIL.match(tail) */
    Py_ssize_t w = skip_rs(s, t, n);
    Py_ssize_t c = w;
    while (c < n && s[c] != ',') c++;
    if (c >= n) return 0;
    Py_ssize_t rb = c;
    while (rb > w && is_rs(s[rb - 1])) rb--;
    Py_ssize_t p = skip_rs(s, c + 1, n);
    if (!startswith(s, p, n, "tactic")) return 0;
    Py_ssize_t ta, tb;
    if (!match_value(s, p + 6, n, &ta, &tb)) return 0;
    Py_ssize_t q = skip_rs(s, tb, n), va = -1, vb = -1;
    if (q < n && s[q] == ',') {
        Py_ssize_t x = skip_rs(s, q + 1, n), y = tok_end(s, x, n);
        if (y > x) va = x, vb = y;
    }
    uint64_t tac;
    int r = tactic_to_int(s, ta, tb, &tac);
    if (r <= 0) return r;
    Py_ssize_t ha = 0, hb = i;
    if (i < 0) { /* s[:-1]: up to the start of the last character */
        hb = 0;
        for (Py_ssize_t p2 = 0; p2 < n; p2 += utf8_char_len(s + p2, n - p2)) hb = p2;
    }
    strip(s, &ha, &hb);
    PyObject *formats = NULL;
    if (hb > ha && s[hb - 1] == ']') {
        Py_ssize_t j = rfind(s, ha, hb, " [");
        if (j >= 0) {
            if (!(formats = strip_str(s, j + 2, hb - 1))) return -1;
            hb = j;
            strip(s, &ha, &hb);
        }
    }
    PyObject *key = NULL, *head;
    /* _KEY_IN.search(head) */
    Py_ssize_t kv = -1;
    for (Py_ssize_t k = find(s, ha, hb, "(key: "); k >= 0; k = find(s, k + 1, hb, "(key: ")) {
        Py_ssize_t x = k + 6;
        if (x + 35 <= hb && s[x] == '0' && (s[x + 1] == 'x' || s[x + 1] == 'X') && s[x + 34] == ')') {
            int ok = 1;
            for (Py_ssize_t y = x + 2; y < x + 34; y++) ok &= is_hex(s[y]);
            if (ok) {
                kv = k;
                break;
            }
        }
    }
    if (kv >= 0) {
        char kb[34];
        for (int x = 0; x < 34; x++) kb[x] = (char)lower(s[kv + 6 + x]);
        key = PyUnicode_FromStringAndSize(kb, 34);
        /* (head[:m.start()] + " " + head[m.end():]).strip(): the match takes the \s runs
         * on both sides of "(key: ...)" */
        Py_ssize_t ms = kv;
        while (ms > ha && is_rs(s[ms - 1])) ms--;
        Py_ssize_t me = skip_rs(s, kv + 41, hb);
        Py_ssize_t len = (ms - ha) + 1 + (hb - me);
        unsigned char *buf = PyMem_Malloc((size_t)len);
        head = NULL;
        if (buf) {
            memcpy(buf, s + ha, (size_t)(ms - ha));
            buf[ms - ha] = ' ';
            memcpy(buf + (ms - ha) + 1, s + me, (size_t)(hb - me));
            head = strip_str(buf, 0, len);
            PyMem_Free(buf);
        } else {
            PyErr_NoMemory();
        }
    } else {
        head = mkstr(s, ha, hb);
    }
    if (!head || (kv >= 0 && !key) || flush_op(S) < 0 || flush_blk(S) < 0) {
        Py_XDECREF(head);
        Py_XDECREF(key);
        Py_XDECREF(formats);
        return -1;
    }
    r = 1;
    if (str_nonempty(head) || key) {
        PyObject *onnx;
        if (S->meta_node && PyUnicode_Compare(S->meta_node, head) == 0)
            onnx = Py_NewRef(S->meta_onnx);
        else
            onnx = empty_tuple();
        if (va >= 0 && endswith(s, va, vb, "ms")) vb -= 2;
        int has_cost = 0;
        double cost = 0;
        PyObject *runner = NULL;
        PyObject *cands = PyList_New(0);
        if (!onnx || !cands || (va >= 0 && opt_float(s, va, vb, &has_cost, &cost) < 0) ||
            (rb > w && !(runner = mkstr(s, w, rb))))
            r = -1;
        else if (emit_record(S, head, key, onnx, cands, 1, tac, NULL, has_cost, cost, 1, runner,
                             S->lineno, s_cached, formats) < 0)
            r = -1;
        Py_XDECREF(onnx);
        Py_XDECREF(cands);
        Py_XDECREF(runner);
    }
    Py_DECREF(head);
    Py_XDECREF(key);
    Py_XDECREF(formats);
    return r;
}

static int cache_line(Scanner *S, U *s, Py_ssize_t n) {
    if (contains(s, 0, n, "got cached result")) return cached_line(S, s, n);
    Py_ssize_t i = find(s, 0, n, "Writing the best tactic");
    if (i >= 0) {
        /* _WRITING.search: "Writing the best tactic " "("? tac([^)\s]+) */
        for (Py_ssize_t p = find(s, 0, n, "Writing the best tactic "); p >= 0;
             p = find(s, p + 1, n, "Writing the best tactic ")) {
            Py_ssize_t q = p + 24, ta = -1, tb = -1;
            for (int paren = 1; paren >= 0 && ta < 0; paren--) {
                Py_ssize_t x = q;
                if (paren) {
                    if (x >= n || s[x] != '(') continue;
                    x++;
                }
                Py_ssize_t y = x;
                while (y < n && s[y] != ')' && !is_rs(s[y])) y++;
                if (y > x) ta = x, tb = y;
            }
            if (ta < 0) continue;
            if (S->op.open) {
                uint64_t tac;
                int r = tactic_to_int(s, ta, tb, &tac);
                if (r < 0) return -1;
                S->op.has_written = r;
                S->op.written = tac;
                if (flush_op(S) < 0) return -1;
            }
            break;
        }
        return 1;
    }
    PyObject *kind = warning_kind(s, n);
    if (kind == NULL) return PyErr_Occurred() ? -1 : 0;
    return warn(S, kind, s, n) < 0 ? -1 : 1;
}

static int add_engine_layer(Scanner *S, PyObject *layer) {
    if (!layer) return -1;
    if (!S->layers_open) {
        PyObject *fresh = PyList_New(0);
        if (!fresh) {
            Py_DECREF(layer);
            return -1;
        }
        Py_SETREF(S->engine_layers, fresh);
        S->layers_open = 1;
    }
    if (PyList_GET_SIZE(S->engine_layers) < MAX_ENGINE_LAYERS) return append_steal(S->engine_layers, layer);
    Py_DECREF(layer);
    return 0;
}

/* _layer_line: "Layer(<Type>): <name>, Tactic: 0x.., <in> -> <out>" */
static int layer_line(Scanner *S, U *line, Py_ssize_t n0) {
    Py_ssize_t a = 0, b = n0;
    strip_prefix(line, &a, &b);
    U *s = line + a;
    Py_ssize_t n = b - a;
    if (!startswith(s, 0, n, "Layer(")) return 0;
    Py_ssize_t r = 6;
    while (r < n && s[r] != ')') r++;
    if (r + 1 >= n || s[r + 1] != ':') return 0;
    Py_ssize_t w = skip_rs(s, r + 2, n);
    Py_ssize_t c = w;
    while (c < n && s[c] != ',') c++;
    Py_ssize_t ta = -1, tb = -1;
    if (c < n && startswith(s, c, n, ", Tactic: ")) {
        Py_ssize_t x = tok_end(s, c + 10, n);
        if (x > c + 10) ta = c + 10, tb = x;
    }
    uint64_t tac = 0;
    int has_tac = 0;
    if (ta >= 0 && (has_tac = tactic_to_int(s, ta, tb, &tac)) < 0) return -1;
    PyObject *name = strip_str(s, w, c);
    PyObject *type = mkstr_or_none(s, 6, r);
    PyObject *tv = has_tac ? PyLong_FromUnsignedLongLong(tac) : Py_NewRef(Py_None);
    PyObject *el = NULL;
    if (name && type && tv) {
        PyObject *args[4] = {name, type, Py_None, tv};
        el = make(&S->layer_m, args, 4);
    }
    Py_XDECREF(name);
    Py_XDECREF(type);
    Py_XDECREF(tv);
    return add_engine_layer(S, el) < 0 ? -1 : 1;
}

/* _oneline: "Name: .., LayerType: .., .." */
static int oneline(Scanner *S, U *line, Py_ssize_t n0) {
    Py_ssize_t a = 0, b = n0;
    strip_prefix(line, &a, &b);
    U *s = line + a;
    Py_ssize_t n = b - a;
    if (!startswith(s, 0, n, "Name: ")) return 0;
    Py_ssize_t i = FIND_LAY(s, 0, n, ", ", "Type: ");
    if (i < 0) return 0;
    PyObject *name = strip_str(s, 6, i);
    Py_ssize_t j = find(s, i + 13, n, ",");
    Py_ssize_t la = i + 13, lb = j < 0 ? n : j;
    strip(s, &la, &lb);
    PyObject *ltype = mkstr_or_none(s, la, lb);
    PyObject *tname = Py_NewRef(Py_None);
    Py_ssize_t k = FIND_TAC(s, 0, n, ", ", "Name: ");
    if (k >= 0) {
        Py_ssize_t e = find(s, k + 14, n, ",");
        Py_ssize_t ta = k + 14, tb = e < 0 ? n : e;
        strip(s, &ta, &tb);
        Py_SETREF(tname, mkstr_or_none(s, ta, tb));
    }
    PyObject *tv = NULL;
    /* _TACTIC_VALUE.search */
    for (Py_ssize_t p = FIND_TAC(s, 0, n, ", ", "Value: "); p >= 0; p = FIND_TAC(s, p + 1, n, ", ", "Value: ")) {
        Py_ssize_t x = tok_end(s, p + 15, n);
        if (x > p + 15) {
            uint64_t tac;
            int r = tactic_to_int(s, p + 15, x, &tac);
            if (r < 0) goto fail;
            tv = r ? PyLong_FromUnsignedLongLong(tac) : Py_NewRef(Py_None);
            break;
        }
    }
    if (!tv) tv = Py_NewRef(Py_None);
    PyObject *md;
    k = find(s, 0, n, ", Metadata:");
    if (k >= 0) {
        md = split_onnx(S->split_onnx, s, k + 11, n);
    } else {
        md = empty_tuple();
    }
    PyObject *el = NULL;
    if (name && ltype && tname && tv && md) {
        PyObject *args[5] = {name, ltype, tname, tv, md};
        el = make(&S->layer_m, args, 5);
    }
    Py_XDECREF(md);
    Py_XDECREF(name);
    Py_XDECREF(ltype);
    Py_XDECREF(tname);
    Py_XDECREF(tv);
    return add_engine_layer(S, el) < 0 ? -1 : 1;
fail:
    Py_XDECREF(name);
    Py_XDECREF(ltype);
    Py_XDECREF(tname);
    return -1;
}

static int layer_misc(Scanner *S, U *line, Py_ssize_t n0) {
    Py_ssize_t a = 0, b = n0;
    strip_prefix(line, &a, &b);
    U *s = line + a;
    Py_ssize_t n = b - a;
    if (startswith(s, 0, n, "Engine Layer Information") || (n == 7 && memcmp(s, "Layers:", 7) == 0)) {
        PyObject *fresh = PyList_New(0);
        if (!fresh) return -1;
        Py_SETREF(S->engine_layers, fresh);
        S->layers_open = 1;
        return 0;
    }
    if (startswith(s, 0, n, "ForeignNode ") && contains(s, 0, n, " metadata: ")) {
        Py_ssize_t p = find(s, 12, n, " metadata: ");
        if (p >= 0) {
            PyObject *node = strip_str(s, 12, p);
            PyObject *onnx = split_onnx(S->split_onnx, s, p + 11, n);
            if (!node || !onnx) {
                Py_XDECREF(node);
                Py_XDECREF(onnx);
                return -1;
            }
            Py_XSETREF(S->meta_node, node);
            Py_XSETREF(S->meta_onnx, onnx);
            if (S->blk.open) attach_meta(S);
        }
        return 0;
    }
    if (startswith(s, 0, n, "Layer(")) return layer_line(S, line, n0) < 0 ? -1 : 0;
    if (startswith(s, 0, n, "Name: ")) return oneline(S, line, n0) < 0 ? -1 : 0;
    return 0;
}

static int separator(Scanner *S) {
    if (flush_op(S) < 0 || flush_blk(S) < 0 || PyList_SetSlice(S->orphans, 0, PY_SSIZE_T_MAX, NULL) < 0)
        return -1;
    Py_INCREF(empty_str);
    Py_SETREF(S->cur_layer, empty_str);
    Py_INCREF(empty_str);
    Py_SETREF(S->set_layer, empty_str);
    Py_CLEAR(S->meta_node);
    Py_CLEAR(S->meta_onnx);
    clear_pending(S);
    S->legacy = 0;
    return 0;
}

/* ---- dispatch (LogParser._line) ---------------------------------------------------------- */

enum {
    F_TACTIC = 1,
    F_C0X = 2,
    F_AUTOTUNING = 4,
    F_TIMING = 8,
    F_COMPUTING = 16,
    F_ACHE = 32,
    F_TACHASH = 64,
    F_LAYER = 128,
};

static uint32_t load32(U *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
}

#define W4(a, b, c, d)                                                                         \
    ((uint32_t)(unsigned char)(a) | (uint32_t)(unsigned char)(b) << 8 |                        \
     (uint32_t)(unsigned char)(c) << 16 | (uint32_t)(unsigned char)(d) << 24)

/* the test at one position where a trigger's first three bytes were seen (little-endian
 * word compares; the x86-64 and arm64 builds are little-endian); records where "Tactic"
 * and "Layer" occur */
ALWAYS_INLINE static unsigned flag_at(Scanner *S, U *line, U *p, Py_ssize_t r) {
    /* the SSSE3/AVX2 scans report ", 0x" at its "0x" and "ache" at its "ch", which can
     * stand within four bytes of the end */
    if (p[0] == '0') {
        if (r >= 2 && p - line >= 2 && p[-2] == ',' && p[-1] == ' ' && p[1] == 'x') {
            S->occ.c0x = p - 2 - line; /* hits come in order: this ends as the last one */
            return F_C0X;
        }
        return 0;
    }
    if (p[0] == 'c')
        return (r >= 3 && p - line >= 1 && p[-1] == 'a' && p[1] == 'h' && p[2] == 'e') ? F_ACHE : 0;
    if (r < 4) return 0;
    uint32_t w = load32(p);
    Occ *o = &S->occ;
    switch (p[0]) {
    case 'T':
        if (w == W4('T', 'a', 'c', 't') && r >= 6 && p[4] == 'i' && p[5] == 'c') {
            if (o->ntac < MAX_OCC) o->tac[o->ntac++] = p - line;
            else o->over = 1;
            return F_TACTIC;
        }
        if (w == W4('T', 'i', 'm', 'i') && r >= 13 && memcmp(p, "Timing Runner", 13) == 0)
            return F_TIMING;
        return 0;
    case ',':
        if (w != W4(',', ' ', '0', 'x')) return 0;
        S->occ.c0x = p - line;
        return F_C0X;

    case 'A':
        return (w == W4('A', 'u', 't', 'o') && r >= 11 && memcmp(p, "Autotuning ", 11) == 0)
                   ? F_AUTOTUNING
                   : 0;
    case 'C':
        if (w == W4('C', 'h', 'o', 's') && r >= 17 && memcmp(p, "Chose Runner Type", 17) == 0)
            S->occ_chose = 1;
        return (w == W4('C', 'o', 'm', 'p') && r >= 19 && memcmp(p, "Computing costs for", 19) == 0)
                   ? F_COMPUTING
                   : 0;
    case 'a':
        return w == W4('a', 'c', 'h', 'e') ? F_ACHE : 0;

    case '(':
        return (w == W4('(', 't', 'a', 'c') && r >= 12 && memcmp(p, "(tactic hash", 12) == 0)
                   ? F_TACHASH
                   : 0;
    case 'L':
        if (w == W4('L', 'a', 'y', 'e') && r >= 5 && p[4] == 'r') {
            if (o->nlay < MAX_OCC) o->lay[o->nlay++] = p - line;
            else o->over = 1;
            return F_LAYER;
        }
        return 0;
    }
    return 0;
}

/* flag_at for every set bit of a hit mask covering s[i..] */
ALWAYS_INLINE static unsigned flag_bits(Scanner *S, U *s, Py_ssize_t n, Py_ssize_t i,
                                        unsigned mask) {
    unsigned f = 0;
    for (; mask; mask &= mask - 1) {
        int b = __builtin_ctz(mask);
        f |= flag_at(S, s, s + i + b, n - i - b);
    }
    return f;
}

/* the first three bytes of each trigger: "Tac" "Tim" ", 0" "Aut" "Com" "Cho" "ach" "(ta"
 * "Lay" */
static int trigram(U *p) {
    switch (p[0]) {
    case 'T': return p[1] == 'a' ? p[2] == 'c' : (p[1] == 'i' && p[2] == 'm');
    case ',': return p[1] == ' ' && p[2] == '0';
    case 'A': return p[1] == 'u' && p[2] == 't';
    case 'C': return (p[1] == 'o' && p[2] == 'm') || (p[1] == 'h' && p[2] == 'o');
    case 'a': return p[1] == 'c' && p[2] == 'h';
    case '(': return p[1] == 't' && p[2] == 'a';
    case 'L': return p[1] == 'a' && p[2] == 'y';
    }
    return 0;
}

#ifdef __SSE2__
/* the trigram bytes, each broadcast to a vector, kept in memory so that the compares take
 * them as operands instead of rebuilding them per call */
enum { K_T, K_COMMA, K_A, K_C, K_a, K_PAREN, K_L, K_i, K_SP, K_u, K_o, K_c, K_t, K_m, K_0, K_h, K_y, NK };
static const char K_CHARS[NK] = {'T', ',', 'A', 'C', 'a', '(', 'L', 'i', ' ', 'u', 'o', 'c', 't', 'm', '0', 'h', 'y'};
static __m128i K[NK];

static void init_k(void) {
    for (int k = 0; k < NK; k++) K[k] = _mm_set1_epi8(K_CHARS[k]);
}

/* positions p..p+15 where a trigram starts, as a bit mask (reads p[0..17]) */
ALWAYS_INLINE static unsigned trigram_mask(U *p) {
#define EQ(v, k) _mm_cmpeq_epi8(v, K[k])
#define AND(a, b) _mm_and_si128(a, b)
#define OR(a, b) _mm_or_si128(a, b)
    __m128i x = _mm_loadu_si128((const __m128i *)p);
    __m128i y = _mm_loadu_si128((const __m128i *)(p + 1));
    __m128i z = _mm_loadu_si128((const __m128i *)(p + 2));
    __m128i ya = EQ(y, K_a);
    __m128i m = AND(EQ(x, K_T), OR(AND(ya, EQ(z, K_c)), AND(EQ(y, K_i), EQ(z, K_m))));
    m = OR(m, AND(AND(EQ(x, K_COMMA), EQ(y, K_SP)), EQ(z, K_0)));
    m = OR(m, AND(AND(EQ(x, K_A), EQ(y, K_u)), EQ(z, K_t)));
    m = OR(m, AND(EQ(x, K_C), OR(AND(EQ(y, K_o), EQ(z, K_m)), AND(EQ(y, K_h), EQ(z, K_o)))));
    m = OR(m, AND(AND(EQ(x, K_a), EQ(y, K_c)), EQ(z, K_h)));
    m = OR(m, AND(AND(EQ(x, K_PAREN), EQ(y, K_t)), EQ(z, K_a)));
    m = OR(m, AND(AND(EQ(x, K_L), ya), EQ(z, K_y)));
#undef EQ
#undef AND
#undef OR
    return (unsigned)_mm_movemask_epi8(m);
}
#endif

#if defined(__x86_64__) || defined(__i386__)
/* SSSE3 "shufti": a byte's class bits are lo[low nibble] & hi[high nibble]. Bit k of the
 * first-byte classes marks the first byte of trigger k, bit k of the second-byte classes
 * the bytes allowed after it, so (first[i] & second[i + 1]) != 0 exactly where a
 * trigger's first two bytes stand ("Ta" "Ti" "Au" "Co" "Ch" "(t" "La", and "0x" for ", 0x"
 * and "ch" for "ache"): about
 * one instruction per byte, and the few hits are compared in full by flag_at. */
static unsigned char SH_LO1[16], SH_HI1[16], SH_LO2[16], SH_HI2[16];
static int have_ssse3, have_avx2;

static void sh_add(unsigned char *lo, unsigned char *hi, unsigned char c, unsigned char bit) {
    lo[c & 15] |= bit;
    hi[c >> 4] |= bit;
}

static void init_shufti(void) {
    /* ", 0x" is found by its "0x": commas are the commonest punctuation in a log */
    static const char *pairs[] = {"Ta", "Ti", "0x", "Au", "Co", "Ch", "ch", "(t", "La"};
    static const char firsts[] = "T0ACc(L";
    for (size_t k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++) {
        unsigned char bit = (unsigned char)(1u << (strchr(firsts, pairs[k][0]) - firsts));
        sh_add(SH_LO1, SH_HI1, (unsigned char)pairs[k][0], bit);
        sh_add(SH_LO2, SH_HI2, (unsigned char)pairs[k][1], bit);
    }
    __builtin_cpu_init();
    have_ssse3 = __builtin_cpu_supports("ssse3");
    have_avx2 = __builtin_cpu_supports("avx2");
#if defined(__x86_64__)
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
    /* REPROBUILD_LOGSCAN_ISA=sse2|ssse3 turns the newer paths off, so that tests can hold
     * every path to the Python parser on one machine */
    const char *isa = getenv("REPROBUILD_LOGSCAN_ISA");
    if (isa && (strcmp(isa, "sse2") == 0 || strcmp(isa, "ssse3") == 0)) {
        have_avx2 = 0;
#if defined(__x86_64__)
        have_sse42 = 0;
#endif
        if (strcmp(isa, "sse2") == 0) have_ssse3 = 0;
    }
}

#define PAIR_MASK(p, out)                                                                      \
    do {                                                                                       \
        __m128i x_ = _mm_loadu_si128((const __m128i *)(p));                                    \
        __m128i y_ = _mm_loadu_si128((const __m128i *)((p) + 1));                              \
        __m128i cx_ = _mm_and_si128(_mm_shuffle_epi8(lo1, _mm_and_si128(x_, nib)),            \
                                    _mm_shuffle_epi8(hi1, _mm_and_si128(_mm_srli_epi16(x_, 4), nib))); \
        __m128i cy_ = _mm_and_si128(_mm_shuffle_epi8(lo2, _mm_and_si128(y_, nib)),            \
                                    _mm_shuffle_epi8(hi2, _mm_and_si128(_mm_srli_epi16(y_, 4), nib))); \
        out = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(cx_, cy_), zero)) ^ 0xFFFFu; \
    } while (0)

__attribute__((target("ssse3"))) static unsigned flags_ssse3(Scanner *S, U *s, Py_ssize_t n) {
    const __m128i nib = _mm_set1_epi8(0x0F), zero = _mm_setzero_si128();
    const __m128i lo1 = _mm_loadu_si128((const __m128i *)SH_LO1);
    const __m128i hi1 = _mm_loadu_si128((const __m128i *)SH_HI1);
    const __m128i lo2 = _mm_loadu_si128((const __m128i *)SH_LO2);
    const __m128i hi2 = _mm_loadu_si128((const __m128i *)SH_HI2);
    unsigned f = 0, mask;
    Py_ssize_t i = 0;
    for (; i + 17 <= n; i += 16) {
        PAIR_MASK(s + i, mask);
        f |= flag_bits(S, s, n, i, mask);
    }
    if (i + 1 < n) { /* the tail (a hit can stand two bytes from the end), padded with zeros */
        unsigned char tail[32] = {0};
        Py_ssize_t r = n - i;
        memcpy(tail, s + i, (size_t)r);
        PAIR_MASK(tail, mask);
        mask &= (1u << r) - 1;
        f |= flag_bits(S, s, n, i, mask);
    }
    return f;
}

/* the same with AVX2: 32 positions per step, and no register copies around pshufb */
#define PAIR_MASK256(p, out)                                                                   \
    do {                                                                                       \
        __m256i x_ = _mm256_loadu_si256((const __m256i *)(p));                                 \
        __m256i y_ = _mm256_loadu_si256((const __m256i *)((p) + 1));                           \
        __m256i cx_ = _mm256_and_si256(                                                        \
            _mm256_shuffle_epi8(lo1, _mm256_and_si256(x_, nib)),                               \
            _mm256_shuffle_epi8(hi1, _mm256_and_si256(_mm256_srli_epi16(x_, 4), nib)));        \
        __m256i cy_ = _mm256_and_si256(                                                        \
            _mm256_shuffle_epi8(lo2, _mm256_and_si256(y_, nib)),                               \
            _mm256_shuffle_epi8(hi2, _mm256_and_si256(_mm256_srli_epi16(y_, 4), nib)));        \
        out = ~(unsigned)_mm256_movemask_epi8(                                                 \
            _mm256_cmpeq_epi8(_mm256_and_si256(cx_, cy_), _mm256_setzero_si256()));            \
    } while (0)


__attribute__((target("avx2"))) static unsigned flags_avx2(Scanner *S, U *s, Py_ssize_t n) {
    const __m256i nib = _mm256_set1_epi8(0x0F);
    const __m256i lo1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)SH_LO1));
    const __m256i hi1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)SH_HI1));
    const __m256i lo2 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)SH_LO2));
    const __m256i hi2 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)SH_HI2));
    unsigned f = 0, mask;
    Py_ssize_t i = 0;
    for (; i + 33 <= n; i += 32) {
        PAIR_MASK256(s + i, mask);
        f |= flag_bits(S, s, n, i, mask);
    }
    if (i + 1 < n) { /* the tail (a hit can stand two bytes from the end): read on past
                      * the line when the buffer allows */
        Py_ssize_t r = n - i;
        if (s + i + 33 <= S->buf_end) {
            PAIR_MASK256(s + i, mask);
        } else {
            unsigned char tail[64] = {0};
            memcpy(tail, s + i, (size_t)r);
            PAIR_MASK256(tail, mask);
        }
        if (r < 32) mask &= (1u << r) - 1;
        f |= flag_bits(S, s, n, i, mask);
    }
    return f;
}
#endif

/* forget the positions recorded for the previous line */
static void occ_reset(Scanner *S, U *line) {
    S->occ.line = line;
    S->occ.ntac = S->occ.nlay = S->occ.over = 0;
    S->occ.c0x = -1;
    S->occ_chose = 0;
}

/* One pass over the line: which of _line's substring tests hold, and where "Tactic" and
 * "Layer" occur. With SSE2, sixteen positions at a time are matched against the
 * triggers' first three bytes, and only the (rare) hits are compared in full. */
static unsigned flags_of(Scanner *S, U *s, Py_ssize_t n) {
    unsigned f = 0;
    Py_ssize_t i = 0;
    occ_reset(S, s);
#if defined(__x86_64__) || defined(__i386__)
    if (have_avx2) return flags_avx2(S, s, n);
    if (have_ssse3) return flags_ssse3(S, s, n);
#endif
#ifdef __SSE2__
    for (; i + 18 <= n; i += 16) {
        unsigned mask = trigram_mask(s + i);
        f |= flag_bits(S, s, n, i, mask);
    }
    if (i + 3 < n) { /* the tail, padded with zeros to one more vector */
        unsigned char tail[32] = {0};
        Py_ssize_t r = n - i;
        memcpy(tail, s + i, (size_t)r);
        unsigned mask = trigram_mask(tail) & ((1u << (r < 16 ? r : 16)) - 1);
        f |= flag_bits(S, s, n, i, mask);
        i = n;
    }
#endif
    for (; i + 3 < n; i++)
        if (trigram(s + i)) f |= flag_at(S, s, s + i, n - i);
    return f;
}

/* LogParser._line after the substring tests: dispatch in Python's order */
static int dispatch(Scanner *S, U *s, Py_ssize_t n, unsigned f) {
    if (!f) return 0;
    int r;
    if ((f & F_TACTIC) && (r = tactic_family(S, s, n)) != 0) return r < 0 ? -1 : 0;
    if (S->op.open && (f & F_C0X) && (r = row_line(S, s, n)) != 0) return r < 0 ? -1 : 0;
    if ((f & F_AUTOTUNING) && (r = autotuning_line(S, s, n)) != 0) return r < 0 ? -1 : 0;
    if ((f & F_TIMING) && (r = timing_runner_line(S, s, n)) != 0) return r < 0 ? -1 : 0;
    if (f & F_COMPUTING) return computing_costs_line(S, s, n) < 0 ? -1 : 0;
    if ((f & F_ACHE) && (r = cache_line(S, s, n)) != 0) return r < 0 ? -1 : 0;
    if (f & F_TACHASH) return selected_line(S, s, n) < 0 ? -1 : 0;
    if (f & F_LAYER) return layer_misc(S, s, n);
    return 0;
}

#define MAX_HITS 64

/* LogParser._line for one line (its newline already cut off). `hits` are the positions
 * (offsets from `base`) where triggers may start, found together with the newline; with
 * `over` set (too many, or none looked for) the line is scanned here instead. */
static int process_line_at(Scanner *S, U *s, Py_ssize_t n, U *base, const int32_t *hits, int nh,
                           int over) {
    if (n > MAX_LINE) { /* cut like a carried line; its hits past the cut do not count */
        n = MAX_LINE;
        over = 1;
    }
    S->lineno++;
    if (n > 0 && s[n - 1] == '\r') n--;
    if (n >= 2 && s[0] == '#' && s[1] == ' ') return separator(S);
    if (over) return dispatch(S, s, n, flags_of(S, s, n));
    occ_reset(S, s);
    unsigned f = 0;
    for (int k = 0; k < nh; k++) {
        U *p = base + hits[k];
        f |= flag_at(S, s, p, n - (p - s));
    }
    return dispatch(S, s, n, f);
}

static int process_line(Scanner *S, U *s, Py_ssize_t n) {
    return process_line_at(S, s, n, NULL, NULL, 0, 1);
}

#if defined(__x86_64__) || defined(__i386__)
/* Complete lines of data[pos:n), found together with their trigger hits in one AVX2 pass
 * (the newline search and the trigger scan share the loads). Returns where the lines it
 * did not reach start (the last one or two blocks are left to the scalar loop), or -1. */
__attribute__((target("avx2"))) static Py_ssize_t feed_avx2(Scanner *S, U *data, Py_ssize_t pos,
                                                           Py_ssize_t n) {
    const __m256i nib = _mm256_set1_epi8(0x0F), nlv = _mm256_set1_epi8('\n');
    const __m256i lo1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)SH_LO1));
    const __m256i hi1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)SH_HI1));
    const __m256i lo2 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)SH_LO2));
    const __m256i hi2 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)SH_HI2));
    int32_t hits[MAX_HITS];
    int nh = 0, over = 0;
    Py_ssize_t start = pos;
    S->buf_end = cur_end = data + n;
    for (Py_ssize_t q = pos; q + 33 <= n; q += 32) {
        unsigned pm;
        PAIR_MASK256(data + q, pm);
        unsigned nl = (unsigned)_mm256_movemask_epi8(
            _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(data + q)), nlv));
        while (nl) {
            int e_off = __builtin_ctz(nl);
            unsigned before = (1u << e_off) - 1; /* e_off < 32 */
            for (unsigned take = pm & before; take; take &= take - 1) {
                if (nh < MAX_HITS) hits[nh++] = (int32_t)(q + __builtin_ctz(take));
                else over = 1;
            }
            pm &= ~before;
            Py_ssize_t e = q + e_off;
            if (process_line_at(S, data + start, e - start, data, hits, nh, over) < 0) return -1;
            S->buf_end = cur_end = data + n;
            nh = over = 0;
            start = e + 1;
            nl &= nl - 1;
        }
        for (; pm; pm &= pm - 1) {
            if (nh < MAX_HITS) hits[nh++] = (int32_t)(q + __builtin_ctz(pm));
            else over = 1;
        }
    }
    return start;
}
#endif

/* ---- the Scanner type --------------------------------------------------------------------- */

static int sync_parser(Scanner *S) {
    PyObject *ln = PyLong_FromSsize_t(S->lineno);
    PyObject *wd = PyLong_FromSsize_t(S->warnings_dropped);
    int r = -1;
    if (ln && wd && PyObject_SetAttr(S->parser, a_lineno, ln) == 0 &&
        PyObject_SetAttr(S->parser, a_warnings_dropped, wd) == 0 &&
        PyObject_SetAttr(S->parser, a_engine_layers, S->engine_layers) == 0)
        r = 0;
    Py_XDECREF(ln);
    Py_XDECREF(wd);
    return r;
}

static PyObject *take_out(Scanner *S) {
    PyObject *fresh = PyList_New(0);
    if (!fresh) return NULL;
    PyObject *out = S->out;
    S->out = fresh;
    return out;
}

static int carry_add(Scanner *S, U *p, Py_ssize_t len) {
    if (S->carry_len + len > MAX_LINE) len = MAX_LINE - S->carry_len; /* cut very long lines */
    if (len <= 0) return 0;
    if (S->carry_len + len + 64 > S->carry_cap) { /* 64: slack for vector loads */
        Py_ssize_t cap = S->carry_cap ? S->carry_cap : 4096;
        while (cap < S->carry_len + len + 64) cap *= 2;
        unsigned char *nc = PyMem_Realloc(S->carry, (size_t)cap);
        if (!nc) {
            PyErr_NoMemory();
            return -1;
        }
        S->carry = nc;
        S->carry_cap = cap;
    }
    memcpy(S->carry + S->carry_len, p, (size_t)len);
    S->carry_len += len;
    return 0;
}

/* The line of data[pos:n) that starts at pos: processed when its newline is in this chunk
 * (completing the carried part, if any), else carried to the next. Returns where the next
 * line starts (n when the rest was carried), or -1 on error. */
static Py_ssize_t feed_line(Scanner *S, U *data, Py_ssize_t pos, Py_ssize_t n) {
    U *nl = memchr(data + pos, '\n', (size_t)(n - pos));
    if (!nl) return carry_add(S, data + pos, n - pos) < 0 ? -1 : n;
    Py_ssize_t end = nl - data;
    int r;
    if (S->carry_len) {
        if (carry_add(S, data + pos, end - pos) < 0) return -1;
        S->buf_end = cur_end = S->carry + S->carry_cap;
        r = process_line(S, S->carry, S->carry_len);
        S->carry_len = 0;
    } else {
        S->buf_end = cur_end = data + n;
        r = process_line(S, data + pos, end - pos);
    }
    return r < 0 ? -1 : end + 1;
}

static PyObject *Scanner_feed(Scanner *S, PyObject *arg) {
    if (S->finished) {
        PyErr_SetString(PyExc_ValueError, "feed() after finish()");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    /* The records are acyclic; collecting while millions of them are made only costs
     * time (gen-0 collections every 700 allocations). */
    int gc_was_on = PyGC_Disable();
    U *data = view.buf;
    Py_ssize_t n = view.len, pos = 0;
    if (S->carry_len && n) pos = feed_line(S, data, 0, n); /* the line left open */
#if defined(__x86_64__) || defined(__i386__)
    if (have_avx2 && pos >= 0 && pos < n && n < INT32_MAX) pos = feed_avx2(S, data, pos, n);
#endif
    while (pos >= 0 && pos < n) pos = feed_line(S, data, pos, n);
    int err = pos < 0;
    PyBuffer_Release(&view);
    if (gc_was_on) PyGC_Enable();
    if (err || sync_parser(S) < 0) return NULL;
    return take_out(S);
}

static PyObject *Scanner_finish(Scanner *S, PyObject *Py_UNUSED(ignored)) {
    if (!S->finished) {
        S->finished = 1;
        if (S->carry_len) {
            Py_ssize_t len = S->carry_len;
            S->carry_len = 0;
            S->buf_end = cur_end = S->carry + S->carry_cap;
            if (process_line(S, S->carry, len) < 0) return NULL;
        }
        if (flush_op(S) < 0 || flush_blk(S) < 0) return NULL;
    }
    if (sync_parser(S) < 0) return NULL;
    return take_out(S);
}

static int Scanner_init(Scanner *S, PyObject *args, PyObject *kwds) {
    PyObject *parser, *cand_t, *rec_t, *warn_t, *layer_t, *split;
    Py_ssize_t max_warnings;
    if (!PyArg_ParseTuple(args, "OO!O!OOOn:Scanner", &parser, &PyType_Type, &cand_t, &PyType_Type,
                          &rec_t, &warn_t, &layer_t, &split, &max_warnings))
        return -1;
    if (cand_t != (PyObject *)&CandType) {
        PyErr_SetString(PyExc_TypeError, "Scanner makes reprobuild._logscan.Candidate objects");
        return -1;
    }
    PyObject *warnings = PyObject_GetAttr(parser, a_warnings);
    if (!warnings) return -1;
    if (!PyList_Check(warnings)) {
        Py_DECREF(warnings);
        PyErr_SetString(PyExc_TypeError, "parser.warnings must be a list");
        return -1;
    }
    PyObject *layers = PyObject_GetAttr(parser, a_engine_layers);
    if (!layers) {
        Py_DECREF(warnings);
        return -1;
    }
    Py_XSETREF(S->parser, Py_NewRef(parser));
    Py_XSETREF(S->rec_t, Py_NewRef(rec_t));
    Py_XSETREF(S->warn_t, Py_NewRef(warn_t));
    Py_XSETREF(S->layer_t, Py_NewRef(layer_t));
    Py_XSETREF(S->split_onnx, Py_NewRef(split));
    maker_clear(&S->warn_m);
    maker_clear(&S->layer_m);
    maker_clear(&S->rec_m);
    if (maker_init(&S->warn_m, warn_t) < 0 || maker_init(&S->layer_m, layer_t) < 0 ||
        maker_init(&S->rec_m, rec_t) < 0)
        return -1;
    Py_XSETREF(S->warnings, warnings);
    Py_XSETREF(S->engine_layers, layers);
    S->max_warnings = max_warnings;
    Py_XSETREF(S->out, PyList_New(0));
    Py_XSETREF(S->orphans, PyList_New(0));
    Py_XSETREF(S->cur_layer, Py_NewRef(empty_str));
    Py_XSETREF(S->set_layer, Py_NewRef(empty_str));
    return (S->out && S->orphans) ? 0 : -1;
}

static int Scanner_traverse(Scanner *S, visitproc visit, void *arg) {
    Py_VISIT(S->parser);
    Py_VISIT(S->rec_t);
    Py_VISIT(S->warn_t);
    Py_VISIT(S->layer_t);
    Py_VISIT(S->split_onnx);
    Py_VISIT(S->warn_m.cls);
    Py_VISIT(S->layer_m.cls);
    Py_VISIT(S->rec_m.cls);
    Py_VISIT(S->warnings);
    Py_VISIT(S->engine_layers);
    Py_VISIT(S->out);
    Py_VISIT(S->orphans);
    Py_VISIT(S->blk.cands);
    Py_VISIT(S->op.cands);
    return 0;
}

static int Scanner_clear(Scanner *S) {
    Py_CLEAR(S->parser);
    Py_CLEAR(S->rec_t);
    Py_CLEAR(S->warn_t);
    Py_CLEAR(S->layer_t);
    Py_CLEAR(S->split_onnx);
    maker_clear(&S->warn_m);
    maker_clear(&S->layer_m);
    maker_clear(&S->rec_m);
    Py_CLEAR(S->warnings);
    Py_CLEAR(S->engine_layers);
    Py_CLEAR(S->out);
    Py_CLEAR(S->orphans);
    Py_CLEAR(S->cur_layer);
    Py_CLEAR(S->set_layer);
    Py_CLEAR(S->meta_node);
    Py_CLEAR(S->meta_onnx);
    Py_CLEAR(S->pending_kernel);
    blk_clear(&S->blk);
    op_clear(&S->op);
    return 0;
}

static void Scanner_dealloc(Scanner *S) {
    PyObject_GC_UnTrack(S);
    Scanner_clear(S);
    PyMem_Free(S->blk.fastest);
    PyMem_Free(S->carry);
    Py_TYPE(S)->tp_free((PyObject *)S);
}

static PyMethodDef Scanner_methods[] = {

    {"feed", (PyCFunction)Scanner_feed, METH_O,
     "feed(data) -> list of records completed by these bytes (cut anywhere)"},
    {"finish", (PyCFunction)Scanner_finish, METH_NOARGS,
     "finish() -> list of records still open at the end of the log"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "reprobuild._logscan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Scanner(parser, Candidate, TacticRecord, LogWarning, EngineLayer, "
              "split_onnx_layers, max_warnings): LogParser's state machine over bytes.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_traverse = (traverseproc)Scanner_traverse,
    .tp_clear = (inquiry)Scanner_clear,
    .tp_methods = Scanner_methods,
};

static PyObject *logscan_isa(PyObject *m, PyObject *Py_UNUSED(ignored)) {
#if defined(__x86_64__) || defined(__i386__)
    return PyUnicode_FromString(have_avx2 ? "avx2" : have_ssse3 ? "ssse3" : "sse2");
#elif defined(__SSE2__)
    return PyUnicode_FromString("sse2");
#else
    return PyUnicode_FromString("scalar");
#endif
}

static PyMethodDef logscan_methods[] = {
    {"isa", logscan_isa, METH_NOARGS, "isa() -> the vector path in use: avx2, ssse3 or sse2"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef logscan_module = {
    PyModuleDef_HEAD_INIT, "_logscan",
    "Native scanner for TensorRT builder logs (see reprobuild.logparse).", -1, logscan_methods, NULL, NULL, NULL, NULL,
};

#define INTERN(var, text)                                                                       \
    do {                                                                                        \
        if (!(var = PyUnicode_InternFromString(text))) return NULL;                             \
    } while (0)

PyMODINIT_FUNC PyInit__logscan(void) {
    init_digval();
#ifdef __SSE2__
    init_k();
#endif
#if defined(__x86_64__) || defined(__i386__)
    init_shufti();
#endif
    INTERN(empty_str, "");
    INTERN(s_runner, "runner");
    INTERN(s_reformat, "reformat");
    INTERN(s_legacy, "legacy");
    INTERN(s_editable, "editable");
    INTERN(s_myelin, "myelin");
    INTERN(s_cached, "cached");
    INTERN(a_layer, "layer");
    INTERN(a_key, "key");
    INTERN(a_onnx_layers, "onnx_layers");
    INTERN(a_candidates, "candidates");
    INTERN(a_chosen, "chosen");
    INTERN(a_chosen_kernel, "chosen_kernel");
    INTERN(a_chosen_cost_ms, "chosen_cost_ms");
    INTERN(a_from_cache, "from_cache");
    INTERN(a_runner, "runner");
    INTERN(a_line, "line");
    INTERN(a_format, "format");
    INTERN(a_formats, "formats");
    INTERN(a_lineno, "lineno");
    INTERN(a_warnings, "warnings");
    INTERN(a_warnings_dropped, "warnings_dropped");
    INTERN(a_engine_layers, "engine_layers");
    INTERN(k_invalid, "cache-invalid");
    INTERN(k_not_used, "cache-not-used");
    INTERN(k_error, "cache-error");
    INTERN(k_miss, "cache-miss");
    INTERN(k_loaded, "cache-loaded");
    INTERN(k_in_use, "cache-in-use");
    INTERN(k_local, "cache-local");
    INTERN(k_serialized, "cache-serialized");
    if (PyType_Ready(&ScannerType) < 0 || PyType_Ready(&CandType) < 0) return NULL;
    PyObject *m = PyModule_Create(&logscan_module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Scanner", (PyObject *)&ScannerType) < 0 ||
        PyModule_AddObjectRef(m, "Candidate", (PyObject *)&CandType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
