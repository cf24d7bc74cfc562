/*
 * C scanner for TensorRT builder verbose logs: LogParser's state machine (logs/parser.py,
 * the specification) over bytes, for whole files. tests/logs/test_logscan.py holds both to
 * identical output on every fixture, chunking and hypothesis-made log. Here: line splitting
 * and trigger words (memchr), block state, and the frequent lines (candidates, table rows,
 * format headers, Timing Runner, Fastest, Chose, Set Tactic, other candidate forms,
 * selected tactics, cached results, op headers, warnings, engine layers), each reader written
 * out after its twin in logs/lines.py. In Python (logs/lines.py, passed in as hooks): written
 * tactics, odd cached-result lines, ONNX lists with non-ASCII text, and numbers that are not
 * plain ASCII, which go to Python's own int()/float(). Objects are
 * made by calling their classes. Every delimiter is ASCII, so byte offsets equal the Python
 * parser's character offsets. In JSON mode (reprobuild log --json) records are not made at
 * all: their JSON text is written from the fields (tests/logs/test_jsonout_native.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <ctype.h>
#include <float.h>
#include <string.h>
#define MAX_LINE (1 << 20)
#define MAX_CANDIDATES 100000
#define MAX_ORPHANS 4096
#define MAX_ENGINE_LAYERS 100000
typedef const unsigned char U;
/* The hooks tuple reader.py passes, in this order. */
enum { H_CAND, H_RECORD, H_WARNING, H_LAYER, H_SPLIT, H_TAC, H_COST, H_WRITING, H_CACHED,
       H_WARNING_FIELDS, H_LAYER_FIELDS, H_COUNT };

/* ---- bytes ------------------------------------------------------------------------------ */
static int is_rs(unsigned c) { return c == ' ' || (c >= '\t' && c <= '\r'); } /* regex \s */
static int is_ws(unsigned c) { return is_rs(c) || (c >= 0x1c && c <= 0x1f); } /* lines.WS */
static int is_digit(unsigned c) { return c >= '0' && c <= '9'; }
static int in_set(unsigned c, const char *set) { return c && strchr(set, (int)c); }
static int lower(unsigned c) { return c >= 'A' && c <= 'Z' ? (int)c + 32 : (int)c; }

/* LogParser._line's trigger words, found by memchr for a byte that is rare in logs (k: a
 * capital or punctuation mark; "ache" by its 'h'), then a compare: cheaper than memmem's
 * set-up on lines of a hundred bytes. */
enum { T_TACTIC, T_ROW, T_AUTOTUNING, T_TIMING, T_COMPUTING, T_ACHE, T_HASH, T_LAYER };
static const struct { const char *lit; Py_ssize_t m, k; } TRIGGER[] = {
    {"Tactic", 6, 0}, {", 0x", 4, 0}, {"Autotuning ", 11, 0}, {"Timing Runner", 13, 0},
    {"Computing costs for", 19, 0}, {"ache", 4, 2}, {"(tactic hash", 12, 0}, {"Layer", 5, 0},
};
static int trig(U *s, Py_ssize_t n, int t) {
    const char *lit = TRIGGER[t].lit;
    Py_ssize_t m = TRIGGER[t].m, k = TRIGGER[t].k;
    for (Py_ssize_t p = k; p + m - k <= n; p++) {
        U *hit = memchr(s + p, lit[k], (size_t)(n - (m - k) - p + 1));
        if (!hit) return 0;
        p = hit - s;
        if (memcmp(hit - k, lit, (size_t)m) == 0) return 1;
    }
    return 0;
}
static Py_ssize_t rfind(U *s, Py_ssize_t from, Py_ssize_t end, const char *lit) {
    Py_ssize_t m = (Py_ssize_t)strlen(lit);
    for (Py_ssize_t i = end - m; i >= from; i--)
        if (s[i] == (unsigned char)lit[0] && memcmp(s + i, lit, (size_t)m) == 0) return i;
    return -1;
}
/* find() for a needle whose byte k is rare in logs (memchr for it, then compare) */
static Py_ssize_t findk(U *s, Py_ssize_t from, Py_ssize_t n, const char *lit, Py_ssize_t k) {
    Py_ssize_t m = (Py_ssize_t)strlen(lit);
    for (Py_ssize_t p = (from < 0 ? 0 : from) + k; p + m - k <= n; p++) {
        U *hit = memchr(s + p, lit[k], (size_t)(n - (m - k) - p + 1));
        if (!hit) return -1;
        p = hit - s;
        if (memcmp(hit - k, lit, (size_t)m) == 0) return p - k;
    }
    return -1;
}
/* s.find(lit, from, n): memchr for the first byte that is not a space or comma (these
 * needles go on with capitals), then compare; cheaper than memmem's set-up on short lines */
static Py_ssize_t find(U *s, Py_ssize_t from, Py_ssize_t n, const char *lit) {
    Py_ssize_t k = 0;
    while (lit[k] == ' ' || lit[k] == ',') k++;
    return findk(s, from, n, lit, lit[k] ? k : 0);
}
static int at(U *s, Py_ssize_t n, Py_ssize_t i, const char *lit) {
    size_t m = strlen(lit);
    return i >= 0 && i + (Py_ssize_t)m <= n && memcmp(s + i, lit, m) == 0;
}
static void strip(U *s, Py_ssize_t *a, Py_ssize_t *b) {
    while (*a < *b && is_ws(s[*a])) (*a)++;
    while (*b > *a && is_ws(s[*b - 1])) (*b)--;
}
static void strip_rs(U *s, Py_ssize_t *a, Py_ssize_t *b) {
    while (*a < *b && is_rs(s[*a])) (*a)++;
    while (*b > *a && is_rs(s[*b - 1])) (*b)--;
}
static PyObject *str(U *s, Py_ssize_t a, Py_ssize_t b) {
    return PyUnicode_DecodeUTF8((const char *)s + a, b - a, "replace");
}
/* hook(s[a:b] as str) */
static PyObject *call_str(PyObject *hook, U *s, Py_ssize_t a, Py_ssize_t b) {
    PyObject *t = str(s, a, b), *r = t ? PyObject_CallOneArg(hook, t) : NULL;
    Py_XDECREF(t);
    return r;
}
/* s[a:b].strip(WS) or None */
static PyObject *str_or_none(U *s, Py_ssize_t a, Py_ssize_t b) {
    strip(s, &a, &b);
    return a < b ? str(s, a, b) : Py_NewRef(Py_None);
}
static PyObject *stripped(U *s, Py_ssize_t a, Py_ssize_t b) {
    strip(s, &a, &b);
    return str(s, a, b);
}

/* ---- numbers: plain ASCII here, anything else through Python's int() / float() --------- */
/* int(s[a:b], base) as an unsigned 64-bit value: 1 ok, 0 out of range or not a number */
static int to_u64(U *s, Py_ssize_t a, Py_ssize_t b, int base, uint64_t *out) {
    strip_rs(s, &a, &b); /* int() strips these (not \x1c-\x1f) */
    Py_ssize_t p = a + (base == 16 && b - a > 2 && s[a] == '0' && (s[a + 1] | 32) == 'x' ? 2 : 0);
    int plain = b > p && b - p <= (base == 16 ? 16 : 19);
    uint64_t v = 0;
    for (Py_ssize_t i = p; plain && i < b; i++) {
        unsigned c = s[i], d = c - '0';
        if (d > 9) d = base == 16 && (c | 32) - 'a' < 6 ? (c | 32) - 'a' + 10 : 99;
        if (d == 99) plain = 0;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (plain) { *out = v; return 1; }
    PyObject *t = str(s, a, b), *n = t ? PyLong_FromUnicodeObject(t, base) : NULL;
    Py_XDECREF(t);
    if (n) *out = PyLong_AsUnsignedLongLong(n);
    Py_XDECREF(n);
    if (PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

/* values.tactic_to_int(s[a:b]) as a new int or None: "0x<hex>" and "[-]<digits>" here
 * (negatives in two's complement), anything else in Python */
static PyObject *tactic_obj(PyObject *hook, U *s, Py_ssize_t a, Py_ssize_t b) {
    uint64_t v;
    int hex = b - a > 2 && s[a] == '0' && (s[a + 1] | 32) == 'x';
    int neg = !hex && b > a && s[a] == '-';
    Py_ssize_t p = a + (hex ? 2 : neg), i = p;
    for (; i < b && (hex ? isxdigit(s[i]) : is_digit(s[i])); i++) {}
    if (i == b && b > p && b - p <= (hex ? 16 : 19) && to_u64(s, p, b, hex ? 16 : 10, &v)) {
        if (!neg || v == 0) return PyLong_FromUnsignedLongLong(v);
        if (v <= (1ULL << 63)) return PyLong_FromUnsignedLongLong(~v + 1); /* 2**64 - v */
        return Py_NewRef(Py_None);
    }
    return call_str(hook, s, a, b);
}

/* [+-]digits[.digits] with 1 to 15 digits in all, as float() reads it: the digits as an
 * integer (exact below 2**53) divided by a power of ten (exact up to 1e22) is one correctly
 * rounded operation, so the nearest double, as strtod finds it (Clinger's fast path). Only
 * where doubles are evaluated in double precision (FLT_EVAL_METHOD 0); -1 if not read. */
static int fast_decimal(U *s, Py_ssize_t a, Py_ssize_t b, double *out) {
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
    static const double P10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7,
                                 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    int neg = a < b && s[a] == '-', digits = 0, frac = -1;
    uint64_t m = 0;
    Py_ssize_t p = a + (a < b && (s[a] == '-' || s[a] == '+'));
    for (; p < b; p++) {
        if (is_digit(s[p])) {
            if (++digits > 15) return -1;
            m = m * 10 + (uint64_t)(s[p] - '0');
            if (frac >= 0) frac++;
        } else if (s[p] == '.' && frac < 0) {
            frac = 0;
        } else {
            return -1;
        }
    }
    if (!digits) return -1;
    double d = (double)m / P10[frac > 0 ? frac : 0];
    *out = neg ? -d : d;
    return 0;
#else
    (void)s, (void)a, (void)b, (void)out;
    return -1;
#endif
}

/* float(s[a:b]) or NULL with the ValueError cleared (other errors stay set) */
static PyObject *to_float(U *s, Py_ssize_t a, Py_ssize_t b) {
    char buf[64];
    Py_ssize_t a0 = a, b0 = b;
    double fast;
    strip_rs(s, &a, &b); /* as float() does */
    if (fast_decimal(s, a, b, &fast) == 0) return PyFloat_FromDouble(fast);
    int plain = b > a && b - a < (Py_ssize_t)sizeof buf;
    for (Py_ssize_t i = a; plain && i < b; i++) plain = is_digit(s[i]) || in_set(s[i], ".eE+-");
    if (plain) {
        memcpy(buf, s + a, (size_t)(b - a));
        buf[b - a] = 0;
        char *end;
        double d = PyOS_string_to_double(buf, &end, NULL);
        if (!PyErr_Occurred() && end == buf + (b - a)) return PyFloat_FromDouble(d);
        PyErr_Clear();
    }
    PyObject *t = str(s, a0, b0), *f = t ? PyFloat_FromString(t) : NULL;
    Py_XDECREF(t);
    if (!f && PyErr_ExceptionMatches(PyExc_ValueError)) PyErr_Clear();
    return f;
}

/* ---- logs.lines.strip_prefix (_PREFIX, then .strip(WS)) -------------------------------- */
static const char *LEVELS[] = {"VERBOSE", "INFO", "WARNING", "WARN", "ERROR", "DEBUG",
                               "INTERNAL_ERROR",
                               "Verbose", "Info", "Warning", "Error", "Debug", NULL};

/* One repetition of _PREFIX's group at p: where it ends, or -1 when no branch matches. */
static Py_ssize_t prefix_item(U *s, Py_ssize_t p, Py_ssize_t n) {
    Py_ssize_t q;
    if (p < n && s[p] == '[') { /* \[[^\[\]\n]*\]\s* */
        for (q = p + 1; q < n && s[q] != '[' && s[q] != ']' && s[q] != '\n'; q++) {}
        if (q < n && s[q] == ']') {
            for (q++; q < n && is_rs(s[q]); q++) {}
            return q;
        }
    }
    for (const char **w = LEVELS; *w; w++) { /* LEVEL(?:\s+TRT)?:\s* */
        if (!at(s, n, p, *w)) continue;
        Py_ssize_t e = p + (Py_ssize_t)strlen(*w);
        for (q = e; q < n && is_rs(s[q]); q++) {}
        if (q > e && at(s, n, q, "TRT:")) q += 4;
        else if (e < n && s[e] == ':') q = e + 1;
        else continue;
        for (; q < n && is_rs(s[q]); q++) {}
        return q;
    }
    if (at(s, n, p, "(foreignNode)")) {
        for (q = p + 13; q < n && is_rs(s[q]); q++) {}
        return q;
    }
    if (p + 11 < n && is_digit(s[p]) && is_digit(s[p + 1]) && is_digit(s[p + 2]) &&
        is_digit(s[p + 3]) && s[p + 4] == '-' && is_digit(s[p + 5]) && is_digit(s[p + 6]) &&
        s[p + 7] == '-' && is_digit(s[p + 8]) && is_digit(s[p + 9]) &&
        (s[p + 10] == ' ' || s[p + 10] == 'T')) {
        for (q = p + 11; q < n && (is_digit(s[q]) || in_set(s[q], ":.+-")); q++) {}
        if (q > p + 11 && q < n && is_rs(s[q])) { /* the run ate any ':'; \s+ must follow */
            for (; q < n && is_rs(s[q]); q++) {}
            return q;
        }
    }
    if (at(s, n, p, "TensorRT backend:")) {
        for (q = p + 17; q < n && is_rs(s[q]); q++) {}
        return q;
    }
    return -1;
}

/* the message of line s[0:n) as s[*a:*b) */
static void strip_prefix(U *s, Py_ssize_t n, Py_ssize_t *a, Py_ssize_t *b) {
    Py_ssize_t p = 0, q;
    while (p < n && is_rs(s[p])) p++;
    while ((q = prefix_item(s, p, n)) >= 0 && q > p) p = q;
    *a = p, *b = n;
    strip(s, a, b);
}
/* lines.strip_prefix(line[0:*n]): the message's start; *n becomes its length */
static U *message(U *line, Py_ssize_t *n) {
    Py_ssize_t a, b;
    strip_prefix(line, *n, &a, &b);
    *n = b - a;
    return line + a;
}

/* ---- logs.lines.warning_kind ------------------------------------------------------------- */
/* Patterns: '#' is \d+, '*' makes the next letter match either case; ci = re.I. */
static const struct { const char *pat, *kind; int ci; } WARN[] = {
    {"Cache result detected as invalid", "cache-invalid", 0},
    {"*invalid timing cache", "cache-invalid", 0},
    {"timing cache will not be used", "cache-not-used", 1},
    {"could not read cache|could not read timing cache", "cache-not-used", 1},
    {NULL, "cache-error", 0}, /* [Cc]ache.*Error Code \d+|Error Code \d+.*[Cc]ache */
    {"timing cache miss", "cache-miss", 1},
    {"loaded # bytes of timing cache|loaded # bytes of the timing cache", "cache-loaded", 1},
    {"using existing timing cache", "cache-loaded", 1},
    {"Global timing cache in use", "cache-in-use", 0},
    {"Local timing cache in use", "cache-local", 0},
    {"Serialized # timing cache entries", "cache-serialized", 0},
    {"Saved # bytes of timing cache", "cache-serialized", 0},
};

/* pattern pat[0:m) matches at s[p:]? */
static int pat_at(U *s, Py_ssize_t n, Py_ssize_t p, const char *pat, size_t m, int ci) {
    for (size_t k = 0; k < m; k++) {
        if (pat[k] == '#') {
            if (p >= n || !is_digit(s[p])) return 0;
            while (p < n && is_digit(s[p])) p++;
        } else if (pat[k] == '*') {
            k++;
            if (p >= n || lower(s[p]) != lower((unsigned char)pat[k])) return 0;
            p++;
        } else {
            unsigned char c = (unsigned char)pat[k];
            if (p >= n || (ci ? lower(s[p]) != lower(c) : s[p] != c)) return 0;
            p++;
        }
    }
    return 1;
}
static int pat_search(U *s, Py_ssize_t n, const char *pat, int ci) {
    while (pat) {
        const char *bar = strchr(pat, '|');
        size_t m = bar ? (size_t)(bar - pat) : strlen(pat);
        /* no pattern starts with '#'; its first letter (either case after '*' or with ci)
         * is checked here before pat_at is called */
        int fold = ci || pat[0] == '*';
        unsigned char c0 = (unsigned char)pat[pat[0] == '*'];
        if (fold) c0 = (unsigned char)lower(c0);
        for (Py_ssize_t p = 0; p < n; p++) {
            if (!fold) {
                U *hit = memchr(s + p, c0, (size_t)(n - p));
                if (!hit) break;
                p = hit - s;
            } else if (lower(s[p]) != c0) {
                continue;
            }
            if (pat_at(s, n, p, pat, m, ci)) return 1;
        }
        pat = bar ? bar + 1 : NULL;
    }
    return 0;
}
static int cache_error(U *s, Py_ssize_t n) {
    Py_ssize_t c_first = -1, c_last = -1, e_first = -1, e_last = -1;
    for (Py_ssize_t p = 0; p < n; p++) {
        if ((s[p] == 'C' || s[p] == 'c') && at(s, n, p + 1, "ache")) {
            if (c_first < 0) c_first = p;
            c_last = p;
        }
        if (s[p] == 'E' && at(s, n, p, "Error Code ") && p + 11 < n && is_digit(s[p + 11])) {
            if (e_first < 0) e_first = p;
            e_last = p;
        }
    }
    return c_first >= 0 && e_first >= 0 && (c_first + 5 <= e_last || e_first + 12 <= c_last);
}
static const char *warning_kind(U *s, Py_ssize_t n) {
    for (size_t i = 0; i < sizeof WARN / sizeof WARN[0]; i++)
        if (WARN[i].pat ? pat_search(s, n, WARN[i].pat, WARN[i].ci) : cache_error(s, n))
            return WARN[i].kind;
    return NULL;
}

/* ---- values.split_onnx_layers ----------------------------------------------------------- */
/* ONNX layer names of s[a:b]: parts between \x1e / \x1f, each .strip()ped, empty ones
 * dropped, "[ONNX Layer: x]" read as x. str.strip() also strips non-ASCII spaces, so text
 * with any non-ASCII byte goes to the Python function (hook). A new tuple. */
static PyObject *split_onnx(PyObject *hook, U *s, Py_ssize_t a, Py_ssize_t b) {
    Py_ssize_t i;
    for (i = a; i < b; i++)
        if (s[i] >= 0x80) return call_str(hook, s, a, b);
    PyObject *names = PyList_New(0), *t = NULL;
    for (Py_ssize_t p = a; names && p <= b; p = i + 1) {
        for (i = p; i < b && s[i] != 0x1e && s[i] != 0x1f; i++) {}
        Py_ssize_t pa = p, pb = i;
        strip(s, &pa, &pb);
        if (pa == pb) continue;
        if (pb - pa >= 14 && at(s, pb, pa, "[ONNX Layer: ") && s[pb - 1] == ']') pa += 13, pb--;
        PyObject *name = str(s, pa, pb);
        if (!name || PyList_Append(names, name) < 0) Py_CLEAR(names);
        Py_XDECREF(name);
    }
    if (names) t = PyList_AsTuple(names);
    Py_XDECREF(names);
    return t;
}

/* ---- state ------------------------------------------------------------------------------- */
typedef struct { /* parser.RunnerBlock; open when cands != NULL */
    PyObject *layer, *formats, *cands, *runner, *fastest, *onnx;
    Py_ssize_t line;
    int reformat;
} Blk;
typedef struct { /* parser.OpBlock; open when cands != NULL; sel/written NULL when absent */
    PyObject *name, *key, *onnx, *cands, *sel, *sel_cost, *written;
    Py_ssize_t line;
    int keyed;
} Op;
typedef struct {
    PyObject_HEAD
    PyObject *parser, *hooks[H_COUNT];
    PyObject *out, *warnings, *engine_layers, *orphans, *cur_layer, *set_layer;
    PyObject *meta_node, *meta_onnx;   /* NULL: no ForeignNode metadata seen */
    PyObject *pend_kernel, *pend_tac;  /* NULL: nothing pending */
    Blk blk;
    Op op;
    Py_ssize_t lineno, dropped, max_warnings, ncarry, capcarry;
    int legacy, layers_open;
    unsigned char *carry;
    /* JSON mode (write != NULL): records become `log --json` text in jbuf, handed to
     * write(bytes) in pieces of about JSON_FLUSH bytes; record_text(rec) -> str writes the
     * records whose fields this file does not know how to print. */
    PyObject *write, *record_text;
    char *jbuf;
    Py_ssize_t jn, jcap, nrec;
} Scanner;
static PyObject *call(Scanner *S, int h, PyObject *const *args, size_t n) {
    return PyObject_Vectorcall(S->hooks[h], args, n, NULL);
}
/* hooks[h](*args) for a frozen slotted dataclass whose recipe hooks[fields] is (names,
 * defaults of the fields past n) (reader._recipe checked it: no __post_init__, no
 * factories): what its generated __init__ does, object.__setattr__ per field, without the
 * Python frame. With no recipe (None), the class is called. */
static PyObject *make(Scanner *S, int h, int fields, PyObject *const *args, Py_ssize_t n) {
    PyObject *recipe = S->hooks[fields];
    if (recipe == Py_None) return call(S, h, args, (size_t)n);
    PyObject *names = PyTuple_GET_ITEM(recipe, 0), *rest = PyTuple_GET_ITEM(recipe, 1);
    PyTypeObject *tp = (PyTypeObject *)S->hooks[h];
    PyObject *o = tp->tp_alloc(tp, 0);
    for (Py_ssize_t i = 0; o && i < PyTuple_GET_SIZE(names); i++) {
        PyObject *v = i < n ? args[i] : PyTuple_GET_ITEM(rest, i - n);
        if (PyObject_GenericSetAttr(o, PyTuple_GET_ITEM(names, i), v) < 0) Py_CLEAR(o);
    }
    return o;
}
static PyObject *call_line(Scanner *S, int h, U *s, Py_ssize_t n) {
    return call_str(S->hooks[h], s, 0, n);
}
static void blk_clear(Blk *b) {
    Py_CLEAR(b->layer); Py_CLEAR(b->formats); Py_CLEAR(b->cands); Py_CLEAR(b->runner);
    Py_CLEAR(b->fastest); Py_CLEAR(b->onnx);
}
static void op_clear(Op *o) {
    Py_CLEAR(o->name); Py_CLEAR(o->key); Py_CLEAR(o->onnx); Py_CLEAR(o->cands);
    Py_CLEAR(o->sel); Py_CLEAR(o->sel_cost); Py_CLEAR(o->written);
}
static int nonempty(PyObject *o) { return o && o != Py_None && PyUnicode_GET_LENGTH(o) > 0; }
static int eq(PyObject *a, PyObject *b) { return PyObject_RichCompareBool(a, b, Py_EQ); }

/* Candidate fields (a NamedTuple): 0 tactic_id, 1 tactic_hash, 2 kernel, 3 cost_ms, 4 runner */
#define CF(c, i) PyTuple_GET_ITEM((c), (i))
/* TacticRecord(layer, key, onnx, cands, chosen, kernel, cost, from_cache, runner, line,
 * format, formats) as a new object */
static PyObject *make_record(Scanner *S, PyObject *const v[9], int cached, Py_ssize_t line,
                             const char *fmt, PyObject *formats) {
    PyObject *ln = PyLong_FromSsize_t(line), *f = PyUnicode_FromString(fmt), *rec = NULL;
    if (ln && f) {
        PyObject *args[12] = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], cached ? Py_True : Py_False,
                              v[8], ln, f, formats};
        rec = call(S, H_RECORD, args, 12);
    }
    Py_XDECREF(ln); Py_XDECREF(f);
    return rec;
}

/* ---- JSON mode: json.dumps(rec.to_json(), ensure_ascii=False), written out directly ------ */
#define JSON_FLUSH (1 << 20) /* bytes handed to write() at a time */
#define JSON_MAX ((Py_ssize_t)1 << 30) /* no record's text is allowed to grow past this */
/* write(memoryview of the buffer): no copy of the text on its way to a file. The view is
 * released afterwards, so a write() that kept it without copying fails loudly rather than
 * seeing the buffer change. */
static int j_flush(Scanner *S) {
    if (!S->jn) return 0;
    PyObject *v = PyMemoryView_FromMemory(S->jbuf, S->jn, PyBUF_READ), *r = NULL;
    S->jn = 0;
    if (v) r = PyObject_CallOneArg(S->write, v);
    if (v) { /* released whether write() worked or not; its error (EPIPE...) is the one kept */
#if PY_VERSION_HEX >= 0x030C0000
        PyObject *et = PyErr_GetRaisedException(), *rel;
#else
        PyObject *et, *ev, *tb, *rel;
        PyErr_Fetch(&et, &ev, &tb);
#endif
        rel = PyObject_CallMethod(v, "release", NULL);
        if (et) {
            Py_XDECREF(rel);
            PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000
            PyErr_SetRaisedException(et);
#else
            PyErr_Restore(et, ev, tb);
#endif
        } else if (!rel) {
            Py_CLEAR(r);
        } else {
            Py_DECREF(rel);
        }
        Py_DECREF(v);
    }
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}
static int j_reserve(Scanner *S, Py_ssize_t more) {
    if (S->jn + more <= S->jcap) return 0;
    if (S->jn + more > JSON_MAX) {
        PyErr_SetString(PyExc_MemoryError, "a record's JSON text is over 1 GiB");
        return -1;
    }
    Py_ssize_t cap = S->jcap ? S->jcap : 2 * JSON_FLUSH;
    while (cap < S->jn + more) cap *= 2;
    char *nb = PyMem_Realloc(S->jbuf, (size_t)cap);
    if (!nb) { PyErr_NoMemory(); return -1; }
    S->jbuf = nb, S->jcap = cap;
    return 0;
}
static int j_put(Scanner *S, const char *p, Py_ssize_t len) {
    if (j_reserve(S, len) < 0) return -1;
    memcpy(S->jbuf + S->jn, p, (size_t)len);
    S->jn += len;
    return 0;
}
#define J_LIT(S, lit) j_put((S), (lit), (Py_ssize_t)sizeof(lit) - 1)
/* a str as json's encode_basestring writes it (ensure_ascii=False), or null for None */
static int j_str(Scanner *S, PyObject *o) {
    if (o == Py_None) return J_LIT(S, "null");
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(o, &n);
    if (!u || j_reserve(S, 6 * n + 2) < 0) return -1; /* \u00XX: 6 bytes at most per byte */
    char *w = S->jbuf + S->jn;
    *w++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t run = i; /* bytes written as they are: copied a run at a time */
        while (i < n && (unsigned char)u[i] >= 0x20 && u[i] != '"' && u[i] != '\\') i++;
        memcpy(w, u + run, (size_t)(i - run));
        w += i - run;
        if (i == n) break;
        unsigned char c = (unsigned char)u[i];
        *w++ = '\\';
        switch (c) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '\n': *w++ = 'n'; break;
        case '\r': *w++ = 'r'; break;
        case '\t': *w++ = 't'; break;
        case '\b': *w++ = 'b'; break;
        case '\f': *w++ = 'f'; break;
        default:
            *w++ = 'u', *w++ = '0', *w++ = '0';
            *w++ = "0123456789abcdef"[c >> 4], *w++ = "0123456789abcdef"[c & 15];
        }
    }
    *w++ = '"';
    S->jn = w - S->jbuf;
    return 0;
}
/* v in base 16 or 10 (lowercase digits), as %llx / %llu write it */
static int j_u64(Scanner *S, unsigned long long v, unsigned base) {
    char b[24], *e = b + sizeof b, *p = e;
    do { *--p = "0123456789abcdef"[v % base]; v /= base; } while (v);
    return j_put(S, p, e - p);
}
static int j_ll(Scanner *S, long long v) {
    if (v < 0 && J_LIT(S, "-") < 0) return -1;
    return j_u64(S, v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v, 10);
}
/* a float as json.dumps writes it: repr when finite, else null (values.json_float). A log
 * prints its times with a few digits, so values recur: their repr (a shortest-digits search,
 * the costliest step of a candidate's text) is kept in a small table indexed by the bits. */
#define REPR_SLOTS 4096
typedef struct { double d; char text[32]; } ReprSlot; /* repr of a double: at most 24 chars */
static ReprSlot repr_table[REPR_SLOTS];
static int j_float(Scanner *S, PyObject *o) {
    double d = PyFloat_AS_DOUBLE(o);
    if (!Py_IS_FINITE(d)) return J_LIT(S, "null");
    unsigned long long bits;
    memcpy(&bits, &d, sizeof bits);
    ReprSlot *slot = &repr_table[(bits ^ (bits >> 29) ^ (bits >> 47)) % REPR_SLOTS];
    if (slot->text[0] && memcmp(&slot->d, &d, sizeof d) == 0)
        return j_put(S, slot->text, (Py_ssize_t)strlen(slot->text));
    char *t = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!t) return -1;
    size_t len = strlen(t);
    if (len < sizeof slot->text) slot->d = d, memcpy(slot->text, t, len + 1);
    int r = j_put(S, t, (Py_ssize_t)len);
    PyMem_Free(t);
    return r;
}
/* The fields this file prints itself; anything else goes to record_text(). */
static int plain_int(PyObject *o) { return PyLong_CheckExact(o); }
static int plain_u64(PyObject *o, unsigned long long *v) {
    if (!PyLong_CheckExact(o)) return 0;
    *v = PyLong_AsUnsignedLongLong(o);
    if (*v == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}
static int plain_ll(PyObject *o) { /* an int json prints as %lld */
    int over;
    long long v = PyLong_AsLongLongAndOverflow(o, &over);
    if (v == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return !over;
}
static int str_or_null(PyObject *o) { return o == Py_None || PyUnicode_CheckExact(o); }
static int num_or_null(PyObject *o) { return o == Py_None || PyFloat_CheckExact(o); }
static int plain_record(Scanner *S, PyObject *const v[9], PyObject *formats) {
    unsigned long long u;
    if (!PyUnicode_CheckExact(v[0]) || !str_or_null(v[1]) || !PyTuple_CheckExact(v[2]) ||
        !PyList_CheckExact(v[3]) || !(v[4] == Py_None || plain_u64(v[4], &u)) ||
        !str_or_null(v[5]) || !num_or_null(v[6]) || !str_or_null(v[8]) || !str_or_null(formats))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v[2]); i++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(v[2], i))) return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v[3]); i++) {
        PyObject *c = PyList_GET_ITEM(v[3], i);
        if (Py_TYPE(c) != (PyTypeObject *)S->hooks[H_CAND] || PyTuple_GET_SIZE(c) != 5) return 0;
        PyObject *id = CF(c, 0);
        /* a tactic hash is made by to_u64, tactic_to_int or tactic_token: always in
         * [0, 2**64), so its type is the only thing to check (the value is not re-read) */
        if (!(id == Py_None || (plain_int(id) && plain_ll(id))) || !PyLong_CheckExact(CF(c, 1)) ||
            !str_or_null(CF(c, 2)) || !num_or_null(CF(c, 3)) || !str_or_null(CF(c, 4)))
            return 0;
    }
    return 1;
}
static int j_candidate(Scanner *S, PyObject *c) {
    PyObject *id = CF(c, 0), *cost = CF(c, 3);
    int r = J_LIT(S, "{\"tactic_id\": ");
    if (r == 0) r = id == Py_None ? J_LIT(S, "null") : j_ll(S, PyLong_AsLongLong(id));
    if (r == 0) r = J_LIT(S, ", \"tactic_hash\": \"0x") ||
                    j_u64(S, PyLong_AsUnsignedLongLongMask(CF(c, 1)), 16) ||
                    J_LIT(S, "\", \"kernel\": ");
    if (r == 0) r = j_str(S, CF(c, 2));
    if (r == 0) r = J_LIT(S, ", \"cost_ms\": ");
    if (r == 0) r = cost == Py_None ? J_LIT(S, "null") : j_float(S, cost);
    if (r == 0) r = J_LIT(S, ", \"runner\": ");
    if (r == 0) r = j_str(S, CF(c, 4));
    return r == 0 ? J_LIT(S, "}") : -1;
}
static int j_record(Scanner *S, PyObject *const v[9], int cached, Py_ssize_t line,
                    const char *fmt, PyObject *formats) {
    PyObject *onnx = v[2], *cands = v[3];
    int r = J_LIT(S, "{\"layer\": ");
    if (r == 0) r = j_str(S, v[0]) || J_LIT(S, ", \"key\": ") || j_str(S, v[1]) ||
                    J_LIT(S, ", \"onnx_layers\": [");
    for (Py_ssize_t i = 0; r == 0 && i < PyTuple_GET_SIZE(onnx); i++)
        r = (i && J_LIT(S, ", ")) || j_str(S, PyTuple_GET_ITEM(onnx, i));
    if (r == 0) r = J_LIT(S, "], \"format\": \"") || j_put(S, fmt, (Py_ssize_t)strlen(fmt)) ||
                    J_LIT(S, "\", \"formats\": ") || j_str(S, formats) ||
                    J_LIT(S, ", \"line\": ") || j_u64(S, (unsigned long long)line, 10) ||
                    J_LIT(S, ", \"runner\": ") || j_str(S, v[8]);
    if (r == 0) r = cached ? J_LIT(S, ", \"from_cache\": true, \"chosen\": ")
                           : J_LIT(S, ", \"from_cache\": false, \"chosen\": ");
    if (r == 0) r = v[4] == Py_None ? J_LIT(S, "null")
                                    : J_LIT(S, "\"0x") ||
                                          j_u64(S, PyLong_AsUnsignedLongLongMask(v[4]), 16) ||
                                          J_LIT(S, "\"");
    if (r == 0) r = J_LIT(S, ", \"chosen_kernel\": ") || j_str(S, v[5]) ||
                    J_LIT(S, ", \"chosen_cost_ms\": ");
    if (r == 0) r = v[6] == Py_None ? J_LIT(S, "null") : j_float(S, v[6]);
    if (r == 0) r = J_LIT(S, ", \"num_candidates\": ") ||
                    j_u64(S, (unsigned long long)PyList_GET_SIZE(cands), 10) ||
                    J_LIT(S, ", \"candidates\": [");
    for (Py_ssize_t i = 0; r == 0 && i < PyList_GET_SIZE(cands); i++) {
        r = (i && J_LIT(S, ", ")) || j_candidate(S, PyList_GET_ITEM(cands, i));
        if (r == 0 && S->jn >= JSON_FLUSH) r = j_flush(S); /* one record can be long */
    }
    return r == 0 ? J_LIT(S, "]}") : -1;
}
/* the record's text (and its separator) into the JSON output */
static int emit_json(Scanner *S, PyObject *const v[9], int cached, Py_ssize_t line,
                     const char *fmt, PyObject *formats) {
    int r = S->nrec++ ? J_LIT(S, ",\n  ") : J_LIT(S, "\n  ");
    if (r == 0 && plain_record(S, v, formats)) {
        r = j_record(S, v, cached, line, fmt, formats);
    } else if (r == 0) { /* a field of an unexpected type: the Python writer prints it */
        PyObject *rec = make_record(S, v, cached, line, fmt, formats);
        PyObject *t = rec ? PyObject_CallOneArg(S->record_text, rec) : NULL;
        Py_ssize_t n;
        const char *u = t && PyUnicode_Check(t) ? PyUnicode_AsUTF8AndSize(t, &n) : NULL;
        if (t && !u && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "record_text: str");
        r = u ? j_put(S, u, n) : -1;
        Py_XDECREF(rec); Py_XDECREF(t);
    }
    return r == 0 && S->jn >= JSON_FLUSH ? j_flush(S) : r;
}

/* a finished record: into the output list, or (JSON mode) its text into the output */
static int emit(Scanner *S, PyObject *const v[9], int cached, Py_ssize_t line, const char *fmt,
                PyObject *formats) {
    S->layers_open = 0;
    if (S->write) return emit_json(S, v, cached, line, fmt, formats);
    PyObject *rec = make_record(S, v, cached, line, fmt, formats);
    int r = rec ? PyList_Append(S->out, rec) : -1;
    Py_XDECREF(rec);
    return r;
}

/* Candidate(ident, tac, kernel, cost, runner), appended to list. Candidate is a NamedTuple,
 * so this is what its generated __new__ does, tuple.__new__(Candidate, fields), without
 * the Python frame around it (logs hold millions of candidates). */
static int make_candidate(Scanner *S, PyObject *list, PyObject *ident, uint64_t tac,
                          PyObject *kernel, PyObject *cost, PyObject *runner) {
    PyObject *t = PyLong_FromUnsignedLongLong(tac);
    if (!t) return -1;
    /* what tuple's tp_new does for a subclass, without the two tuples it goes through */
    PyTypeObject *tp = (PyTypeObject *)S->hooks[H_CAND];
    PyObject *c = tp->tp_alloc(tp, 5), *fields[5] = {ident, t, kernel, cost, runner};
    for (int i = 0; c && i < 5; i++) PyTuple_SET_ITEM(c, i, Py_NewRef(fields[i]));
    Py_DECREF(t);
    int r = c ? PyList_Append(list, c) : -1;
    Py_XDECREF(c);
    return r;
}

static double cost_key(PyObject *v) { return v == Py_None ? Py_HUGE_VAL : PyFloat_AsDouble(v); }

/* ---- blocks (parser.BlockState) ---------------------------------------------------------- */
static void attach_meta(Scanner *S) {
    if (S->meta_node && nonempty(S->blk.layer) && eq(S->meta_node, S->blk.layer) > 0)
        Py_XSETREF(S->blk.onnx, Py_NewRef(S->meta_onnx));
}
static int emit_runner_block(Scanner *S, Blk *b, PyObject *chosen, PyObject *runner) {
    PyObject *layer = nonempty(b->layer) ? b->layer : S->set_layer;
    if (!nonempty(layer)) return 0;
    PyObject *kernel = Py_None, *cost = Py_None;
    if (chosen != Py_None) {
        PyObject *match = NULL;
        for (int pass = 0; pass < 2 && !match; pass++)
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(b->cands) && !match; i++) {
                PyObject *c = PyList_GET_ITEM(b->cands, i);
                if (eq(CF(c, 1), chosen) > 0 && (pass || eq(CF(c, 4), runner) > 0)) match = c;
            }
        if (match) kernel = CF(match, 2), cost = CF(match, 3);
        for (Py_ssize_t i = 0; cost == Py_None && i < PyList_GET_SIZE(b->fastest); i++) {
            PyObject *f = PyList_GET_ITEM(b->fastest, i);
            if (eq(PyTuple_GET_ITEM(f, 1), chosen) > 0) { cost = PyTuple_GET_ITEM(f, 2); break; }
        }
    }
    PyObject *v[9] = {layer, Py_None, b->onnx, b->cands, chosen, kernel, cost, NULL, runner};
    const char *fmt = b->reformat ? "reformat" : S->legacy ? "legacy" : "runner";
    return emit(S, v, 0, b->line, fmt, b->formats);
}

/* _flush_blk: end a block without a Chose Runner Type line (reformat, or cut off) */
static int flush_blk(Scanner *S) {
    if (!S->blk.cands) return 0;
    Blk b = S->blk;
    memset(&S->blk, 0, sizeof S->blk);
    int r = 0;
    if (b.reformat) {
        PyObject *best = NULL, *list = PyList_GET_SIZE(b.fastest) ? b.fastest : b.cands;
        int from_fastest = list == b.fastest;
        double best_key = 0;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
            PyObject *x = PyList_GET_ITEM(list, i);
            double k = cost_key(PyTuple_GET_ITEM(x, from_fastest ? 2 : 3));
            if (!best || k < best_key) best = x, best_key = k;
        }
        if (best) /* min(): the first of the fastest; (runner, tactic) of a fastest or candidate */
            r = emit_runner_block(S, &b, PyTuple_GET_ITEM(best, 1),
                                  PyTuple_GET_ITEM(best, from_fastest ? 0 : 4));
    } else if (PyList_GET_SIZE(b.cands) || PyList_GET_SIZE(b.fastest)) {
        r = emit_runner_block(S, &b, Py_None, Py_None);
    }
    blk_clear(&b);
    return r;
}
static int flush_op(Scanner *S) {
    if (!S->op.cands) return 0;
    Op o = S->op;
    memset(&S->op, 0, sizeof S->op);
    PyObject *chosen = o.sel ? o.sel : o.written ? o.written : Py_None;
    if (chosen == Py_None && !o.keyed && PyList_GET_SIZE(o.cands))
        chosen = CF(PyList_GET_ITEM(o.cands, 0), 1); /* sorted table: first row is the fastest */
    int r = 0;
    if ((o.keyed || chosen != Py_None) && (nonempty(o.name) || o.key != Py_None)) {
        PyObject *kernel = Py_None, *cost = o.sel_cost ? o.sel_cost : Py_None;
        for (Py_ssize_t i = 0; chosen != Py_None && i < PyList_GET_SIZE(o.cands); i++) {
            PyObject *c = PyList_GET_ITEM(o.cands, i);
            if (eq(CF(c, 1), chosen) > 0) {
                kernel = CF(c, 2);
                if (cost == Py_None) cost = CF(c, 3);
                break;
            }
        }
        PyObject *v[9] = {o.name, o.key, o.onnx, o.cands, chosen, kernel, cost, NULL, Py_None};
        r = emit(S, v, 0, o.line, o.keyed ? "editable" : "myelin", Py_None);
    }
    op_clear(&o);
    return r;
}
static int flush_both(Scanner *S) { return flush_op(S) < 0 || flush_blk(S) < 0 ? -1 : 0; }
static void clear_pending(Scanner *S) { Py_CLEAR(S->pend_kernel); Py_CLEAR(S->pend_tac); }
#define clear_orphans(S) PyList_SetSlice((S)->orphans, 0, PY_SSIZE_T_MAX, NULL)

/* a runner block; layer and formats are stolen */
static int blk_open(Scanner *S, PyObject *layer, PyObject *formats, int reformat, PyObject *cands) {
    S->blk.layer = layer;
    S->blk.formats = formats;
    S->blk.cands = cands;
    S->blk.runner = Py_NewRef(Py_None);
    S->blk.fastest = PyList_New(0);
    S->blk.onnx = PyTuple_New(0);
    S->blk.line = S->lineno;
    S->blk.reformat = reformat;
    if (!layer || !formats || !cands || !S->blk.fastest || !S->blk.onnx) return -1;
    attach_meta(S);
    return 0;
}

/* _open_implicit: a block whose header was not printed (excerpt starting mid-block) */
static int open_implicit(Scanner *S, PyObject *layer, int reformat) {
    PyObject *name = nonempty(layer) ? layer : nonempty(S->cur_layer) ? S->cur_layer : S->set_layer;
    PyObject *cands = S->orphans;
    if (!(S->orphans = PyList_New(0))) { S->orphans = cands; return -1; }
    return blk_open(S, Py_NewRef(name), Py_NewRef(Py_None), reformat, cands);
}
static int warn(Scanner *S, const char *kind, PyObject *message) { /* steals message */
    if (!message) return -1;
    if (PyList_GET_SIZE(S->warnings) >= S->max_warnings) {
        S->dropped++;
        Py_DECREF(message);
        return 0;
    }
    PyObject *line = PyLong_FromSsize_t(S->lineno), *k = PyUnicode_FromString(kind), *w = NULL;
    PyObject *args[3] = {line, k, message};
    if (line && k) w = make(S, H_WARNING, H_WARNING_FIELDS, args, 3);
    int r = w ? PyList_Append(S->warnings, w) : -1;
    Py_XDECREF(line); Py_XDECREF(k); Py_XDECREF(w); Py_DECREF(message);
    return r;
}
static int new_layers(Scanner *S) { /* engine_layers = [] for the next engine */
    PyObject *fresh = PyList_New(0);
    if (!fresh) return -1;
    Py_SETREF(S->engine_layers, fresh);
    S->layers_open = 1;
    return 0;
}
static int add_engine_layer(Scanner *S, PyObject *const args[5]) {
    if (!S->layers_open && new_layers(S) < 0) return -1;
    if (PyList_GET_SIZE(S->engine_layers) >= MAX_ENGINE_LAYERS) return 0;
    PyObject *layer = make(S, H_LAYER, H_LAYER_FIELDS, args, 5);
    int r = layer ? PyList_Append(S->engine_layers, layer) : -1;
    Py_XDECREF(layer);
    return r;
}
static int separator(Scanner *S) {
    if (flush_both(S) < 0 || clear_orphans(S) < 0) return -1;
    Py_SETREF(S->cur_layer, PyUnicode_New(0, 0)); Py_SETREF(S->set_layer, PyUnicode_New(0, 0));
    Py_CLEAR(S->meta_node); Py_CLEAR(S->meta_onnx);
    clear_pending(S);
    S->legacy = 0;
    return 0;
}

/* ---- line handlers: 1 handled, 0 not (the dispatch goes on), -1 error ---------------- */
/* _candidate: a candidate line outside the fast path's conditions */
static int candidate(Scanner *S, uint64_t tac, int hex, PyObject *kernel, PyObject *cost) {
    if (S->op.cands && flush_op(S) < 0) return -1;
    if (S->pend_kernel) {
        uint64_t pt = 0;
        if (S->pend_tac != Py_None) pt = PyLong_AsUnsignedLongLong(S->pend_tac);
        int same = S->pend_tac == Py_None || pt == tac;
        if (kernel == Py_None && same) kernel = S->pend_kernel;
        Py_INCREF(kernel); /* survives clear_pending */
        clear_pending(S);
    } else { Py_INCREF(kernel); }
    if (!hex) S->legacy = 1;
    int r = 0;
    if (S->blk.cands) {
        if (PyList_GET_SIZE(S->blk.cands) < MAX_CANDIDATES)
            r = make_candidate(S, S->blk.cands, Py_None, tac, kernel, cost, S->blk.runner);
    } else {
        if (PyList_GET_SIZE(S->orphans) >= MAX_ORPHANS)
            r = PyList_SetSlice(S->orphans, 0, MAX_ORPHANS / 2, NULL);
        if (r == 0) r = make_candidate(S, S->orphans, Py_None, tac, kernel, cost, Py_None);
    }
    Py_DECREF(kernel);
    return r < 0 ? -1 : 1;
}
static int layer_line(Scanner *S, U *line, Py_ssize_t n);
static int oneline(Scanner *S, U *line, Py_ssize_t n);
/* hooks returning a tuple or None: the handler below unpacks it */
#define HOOK_OR_RETURN(t, h)           \
    PyObject *t = call_line(S, (h), s, n); \
    if (!t || t == Py_None) { Py_XDECREF(t); return t ? 0 : -1; }
/* s[a:b].split("[", 1)[0].strip(WS) or None: a runner name in parentheses */
static PyObject *runner_name(U *s, Py_ssize_t a, Py_ssize_t b) {
    U *br = b > a ? memchr(s + a, '[', (size_t)(b - a)) : NULL;
    return str_or_none(s, a, br ? br - s : b);
}
static int no_byte(U *s, Py_ssize_t a, Py_ssize_t b, int c) {
    return b <= a || !memchr(s + a, c, (size_t)(b - a));
}
/* end of the run of [^\s,] from p (regex \s with re.ASCII) */
static Py_ssize_t token_end(U *s, Py_ssize_t p, Py_ssize_t n) {
    while (p < n && !is_rs(s[p]) && s[p] != ',') p++;
    return p;
}
/* lines.fastest_parts: (tactic, time, layer or "", runner or None) as a new tuple, or None */
static PyObject *fastest_parts(Scanner *S, U *s, Py_ssize_t n) {
    Py_ssize_t i = find(s, 0, n, "Fastest Tactic: "), ta, tb, p, wa, wb;
    if (i < 0) return Py_NewRef(Py_None);
    /* FASTEST_TAIL.match(line, i): token, \s+, "Time", ":"?, \s*, token */
    ta = i + 16, tb = token_end(s, ta, n);
    for (p = tb; p < n && is_rs(s[p]); p++) {}
    if (tb == ta || p == tb || !at(s, n, p, "Time")) return Py_NewRef(Py_None);
    p += 4;
    int colon = p < n && s[p] == ':';
    for (p += colon; p < n && is_rs(s[p]); p++) {}
    wa = p, wb = token_end(s, p, n);
    /* no time after "Time:": the regex backtracks and reads ":" as the time (not a number) */
    if (wb == wa && !colon) return Py_NewRef(Py_None);
    PyObject *tac = tactic_obj(S->hooks[H_TAC], s, ta, tb);
    if (!tac || tac == Py_None) return tac;
    while (wb > wa && s[wb - 1] == ';') wb--; /* values.to_float: .rstrip(",;") */
    PyObject *time = wb > wa ? to_float(s, wa, wb) : NULL, *layer = NULL, *runner = NULL;
    if (!time && !PyErr_Occurred()) time = Py_NewRef(Py_None);
    /* the last " (<runner>) profiling completed" before i names the layer and runner */
    for (Py_ssize_t q = rfind(s, 0, i, ") profiling completed"); time && q >= 0;
         q = rfind(s, 0, q + 20, ") profiling completed")) {
        Py_ssize_t o = q - 1;
        while (o >= 0 && s[o] != '(') o--;
        if (o >= 1 && s[o - 1] == ' ' && no_byte(s, o + 1, q, ')')) {
            Py_ssize_t a, b;
            strip_prefix(s, o - 1, &a, &b);
            layer = str(s, a, b), runner = runner_name(s, o + 1, q);
            break;
        }
    }
    if (time && !layer && !runner) layer = PyUnicode_New(0, 0), runner = Py_NewRef(Py_None);
    PyObject *t = time && layer && runner ? PyTuple_Pack(4, tac, time, layer, runner) : NULL;
    Py_DECREF(tac); Py_XDECREF(time); Py_XDECREF(layer); Py_XDECREF(runner);
    return t;
}
#define PARTS_OR_RETURN(t, call)                                  \
    PyObject *t = (call);                                         \
    if (!t || t == Py_None) { Py_XDECREF(t); return t ? 0 : -1; }
static int fastest(Scanner *S, U *s, Py_ssize_t n) { /* (tactic, time, layer, runner) */
    PARTS_OR_RETURN(t, fastest_parts(S, s, n))
    PyObject *layer = PyTuple_GET_ITEM(t, 2), *runner = PyTuple_GET_ITEM(t, 3);
    int r = flush_op(S);
    if (r == 0 && !S->blk.cands) r = open_implicit(S, layer, 0);
    if (r == 0 && nonempty(layer) && !nonempty(S->blk.layer)) {
        Py_XSETREF(S->blk.layer, Py_NewRef(layer));
        attach_meta(S);
    }
    if (runner == Py_None) runner = S->blk.runner;
    PyObject *f = r == 0 ? PyTuple_Pack(3, runner, PyTuple_GET_ITEM(t, 0), PyTuple_GET_ITEM(t, 1))
                         : NULL;
    r = f ? PyList_Append(S->blk.fastest, f) : -1;
    Py_XDECREF(f); Py_DECREF(t);
    return r < 0 ? -1 : 1;
}
/* lines.chose_parts: (tactic, runner, hex?) as a new tuple, or None. CHOSE.search: the runner
 * (lazy, one character at least) runs to the first " Tactic: " followed by a token; only
 * the first "Chose Runner Type: " can match, as later ones see a subset of those. */
static PyObject *chose_parts(Scanner *S, U *s, Py_ssize_t n) {
    Py_ssize_t k = find(s, 0, n, "Chose Runner Type: "), t = -1, e = 0;
    if (k < 0) return Py_NewRef(Py_None);
    for (t = find(s, k + 20, n, " Tactic: "); t >= 0; t = find(s, t + 1, n, " Tactic: "))
        if ((e = token_end(s, t + 9, n)) > t + 9) break;
    if (t < 0) return Py_NewRef(Py_None);
    PyObject *tac = tactic_obj(S->hooks[H_TAC], s, t + 9, e);
    if (!tac || tac == Py_None) return tac;
    PyObject *runner = stripped(s, k + 19, t), *r = NULL;
    int hex = e - t - 9 >= 2 && s[t + 9] == '0' && (s[t + 10] | 32) == 'x';
    if (runner) r = PyTuple_Pack(3, tac, runner, hex ? Py_True : Py_False);
    Py_DECREF(tac); Py_XDECREF(runner);
    return r;
}
static int chose(Scanner *S, U *s, Py_ssize_t n) { /* (tactic, runner, hex?) */
    PARTS_OR_RETURN(t, chose_parts(S, s, n))
    int r = flush_op(S);
    if (r == 0 && !S->blk.cands) r = open_implicit(S, Py_None, 0);
    if (r == 0) {
        if (!PyObject_IsTrue(PyTuple_GET_ITEM(t, 2))) S->legacy = 1;
        Blk b = S->blk;
        memset(&S->blk, 0, sizeof S->blk);
        r = emit_runner_block(S, &b, PyTuple_GET_ITEM(t, 0), PyTuple_GET_ITEM(t, 1));
        blk_clear(&b);
    }
    Py_DECREF(t);
    return r < 0 ? -1 : 1;
}
/* lines.set_tactic_parts: (layer or None, kernel, tactic or None) as a new tuple, or None.
 * SET_TACTIC's lazy layer ends at the smallest end over every "Set Tactic Name: ": before
 * the whitespace ahead of it, or before one "(...)" group and the whitespace around it. */
static PyObject *set_tactic_parts(Scanner *S, U *line, Py_ssize_t n) {
    static const char SET[] = "Set Tactic Name: ";
    U *s = message(line, &n);
    Py_ssize_t best = -1, bq = -1;
    for (Py_ssize_t q = find(s, 0, n, SET); q >= 0; q = find(s, q + 1, n, SET)) {
        Py_ssize_t r = q, o;
        while (r > 0 && is_rs(s[r - 1])) r--;
        if (best < 0 || r < best) best = r, bq = q;
        if (r > 0 && s[r - 1] == ')') {
            for (o = r - 2; o >= 0 && s[o] != '('; o--) {}
            if (o >= 0 && no_byte(s, o + 1, r - 1, ')')) {
                while (o > 0 && is_rs(s[o - 1])) o--;
                if (o < best) best = o, bq = q;
            }
        }
    }
    if (bq < 0) return Py_NewRef(Py_None);
    Py_ssize_t start = bq + 17, stop = n, kend, t;
    while (stop > 0 && is_rs(s[stop - 1])) stop--;
    kend = stop;
    t = rfind(s, start, stop, " Tactic: ");
    PyObject *tac = Py_NewRef(Py_None);
    if (t >= 0 && stop > t + 9 && token_end(s, t + 9, stop) == stop) {
        kend = t;
        Py_SETREF(tac, tactic_obj(S->hooks[H_TAC], s, t + 9, stop));
    }
    if (kend < start) kend = start;
    PyObject *layer = best > 0 ? stripped(s, 0, best) : Py_NewRef(Py_None);
    PyObject *kernel = stripped(s, start, kend), *r = NULL;
    if (tac && layer && kernel) r = PyTuple_Pack(3, layer, kernel, tac);
    Py_XDECREF(tac); Py_XDECREF(layer); Py_XDECREF(kernel);
    return r;
}
static int set_tactic(Scanner *S, U *s, Py_ssize_t n) {
    PARTS_OR_RETURN(t, set_tactic_parts(S, s, n))
    int r = flush_op(S);
    clear_pending(S);
    S->pend_kernel = Py_NewRef(PyTuple_GET_ITEM(t, 1));
    S->pend_tac = Py_NewRef(PyTuple_GET_ITEM(t, 2));
    PyObject *layer = PyTuple_GET_ITEM(t, 0);
    if (layer != Py_None) Py_SETREF(S->set_layer, Py_NewRef(layer));
    S->legacy = 1;
    Py_DECREF(t);
    return r < 0 ? -1 : 1;
}
/* CAND's tail at q: "Tactic: " (0x<hex>+ | -?<digits>) " " (Time|time) ":"? \s* <time>;
 * 1 with the tactic s[*ta:*tb] and the time s[*wa:*wb] (empty: the time is None) */
static int cand_tail(U *s, Py_ssize_t n, Py_ssize_t q, Py_ssize_t *ta, Py_ssize_t *tb,
                     Py_ssize_t *wa, Py_ssize_t *wb) {
    Py_ssize_t p = q + 8, e = -1, d;
    if (!at(s, n, q, "Tactic: ")) return 0;
    if (at(s, n, p, "0x") && p + 2 < n && isxdigit(s[p + 2])) {
        for (e = p + 2; e < n && isxdigit(s[e]); e++) {}
        if (e >= n || s[e] != ' ') e = -1;
    }
    if (e < 0) { /* the other branch, -?[0-9]+ */
        for (d = e = p + (p < n && s[p] == '-'); e < n && is_digit(s[e]); e++) {}
        if (e == d || e >= n || s[e] != ' ') return 0;
    }
    *ta = p, *tb = e++;
    if (!at(s, n, e, "Time") && !at(s, n, e, "time")) return 0;
    e += 4;
    int colon = e < n && s[e] == ':';
    for (e += colon; e < n && is_rs(s[e]); e++) {}
    *wa = e, *wb = token_end(s, e, n);
    return *wb > *wa || colon; /* no time after ':': the regex reads ":" as the time (None) */
}
/* lines.cand_parts: (tactic, hex?, kernel, time) as a new tuple, or None. CAND.search: the
 * leftmost "Tactic Name: " whose lazy kernel reaches a " Tactic: " with a valid tail, or
 * "Tactic: " with one. */
static PyObject *cand_parts(Scanner *S, U *s, Py_ssize_t n) {
    Py_ssize_t ta = 0, tb = 0, wa = 0, wb = 0, ka = -1, kb = -1, hit = -1;
    for (Py_ssize_t p = find(s, 0, n, "Tactic"); p >= 0 && hit < 0;
         p = find(s, p + 1, n, "Tactic")) { /* where both literals start */
        if (at(s, n, p, "Tactic Name: ")) {
            for (Py_ssize_t t = find(s, p + 14, n, " Tactic: "); t >= 0;
                 t = find(s, t + 1, n, " Tactic: "))
                if (cand_tail(s, n, t + 1, &ta, &tb, &wa, &wb)) {
                    hit = p, ka = p + 13, kb = t;
                    break;
                }
        } else if (cand_tail(s, n, p, &ta, &tb, &wa, &wb)) {
            hit = p;
        }
    }
    if (hit < 0) return Py_NewRef(Py_None);
    PyObject *tac = tactic_obj(S->hooks[H_TAC], s, ta, tb);
    if (!tac || tac == Py_None) return tac;
    while (wb > wa && s[wb - 1] == ';') wb--; /* values.to_float: .rstrip(",;") */
    PyObject *time = wb > wa ? to_float(s, wa, wb) : NULL, *r = NULL;
    if (!time && !PyErr_Occurred()) time = Py_NewRef(Py_None);
    PyObject *kernel = ka >= 0 ? str(s, ka, kb) : Py_NewRef(Py_None);
    int hex = s[ta] == '0' && ta + 1 < tb && s[ta + 1] == 'x';
    if (time && kernel) r = PyTuple_Pack(4, tac, hex ? Py_True : Py_False, kernel, time);
    Py_DECREF(tac); Py_XDECREF(time); Py_XDECREF(kernel);
    return r;
}
static int cand_regex(Scanner *S, U *s, Py_ssize_t n) {
    PARTS_OR_RETURN(t, cand_parts(S, s, n))
    uint64_t tac = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 0));
    int r = candidate(S, tac, PyObject_IsTrue(PyTuple_GET_ITEM(t, 1)), PyTuple_GET_ITEM(t, 2),
                      PyTuple_GET_ITEM(t, 3));
    Py_DECREF(t);
    return r;
}

/* _tactic_family, with the fast path for "[Tactic Name: K ]Tactic: 0x.. Time: t" */
static int tactic_family(Scanner *S, U *s, Py_ssize_t n) {
    Py_ssize_t i = findk(s, 0, n, "Tactic: ", 0), j = i >= 0 ? findk(s, i, n, " Time: ", 1) : -1;
    uint64_t tac;
    if (j > 0 && !at(s, n, i - 8, "Fastest ")) {
        Py_ssize_t ta = i + 8;
        int hex = j - ta >= 2 && s[ta] == '0' && s[ta + 1] == 'x';
        if (to_u64(s, ta, j, hex ? 16 : 10, &tac)) {
            Py_ssize_t k = rfind(s, 0, i, "Tactic Name: ");
            PyObject *kernel = k >= 0 ? str_or_none(s, k + 13, i) : Py_NewRef(Py_None);
            PyObject *cost = kernel ? to_float(s, j + 7, n) : NULL;
            if (kernel && !cost && !PyErr_Occurred())
                cost = call_str(S->hooks[H_COST], s, j + 7, n); /* float(tail) failed */
            int r = -1;
            if (cost) {
                if (S->blk.cands && !S->op.cands && !S->pend_kernel) {
                    if (!(j - ta >= 2 && s[ta + 1] == 'x')) S->legacy = 1;
                    r = PyList_GET_SIZE(S->blk.cands) < MAX_CANDIDATES
                            ? make_candidate(S, S->blk.cands, Py_None, tac, kernel, cost,
                                             S->blk.runner)
                            : 0;
                    r = r < 0 ? -1 : 1;
                } else {
                    int h = j - ta >= 2 && s[ta] == '0' && (s[ta + 1] | 32) == 'x';
                    r = candidate(S, tac, h, kernel, cost);
                }
            }
            Py_XDECREF(kernel); Py_XDECREF(cost);
            return r;
        }
        if (PyErr_Occurred()) return -1;
    }
    if (find(s, 0, n, "Fastest Tactic") >= 0) return fastest(S, s, n);
    if (find(s, 0, n, "Chose Runner Type") >= 0) return chose(S, s, n);
    if (find(s, 0, n, "Set Tactic Name") >= 0) return set_tactic(S, s, n);
    if (find(s, 0, n, "Layer(") >= 0) return layer_line(S, s, n);
    if (find(s, 0, n, "LayerType: ") >= 0) return oneline(S, s, n);
    return cand_regex(S, s, n);
}

/* _row: "<id>, <cost>, <ratio>, <correlation>, <kernel>, 0x<hash>, [<tunable>]" */
static int row(Scanner *S, U *s, Py_ssize_t n) {
    Py_ssize_t h = rfind(s, 0, n, ", 0x"), e = findk(s, h + 2, n, ",", 0), c[4], p = h;
    if (e < 0) return 0;
    for (int k = 0; k < 4; k++) { /* line[:h].rsplit(",", 4) */
        while (--p >= 0 && s[p] != ',') {}
        if (p < 0) return 0;
        c[k] = p;
    }
    Py_ssize_t id0 = c[3];
    while (id0 > 0 && s[id0 - 1] != ' ') id0--;
    uint64_t tac, ident;
    if (!to_u64(s, h + 2, e, 16, &tac)) return PyErr_Occurred() ? -1 : 0;
    PyObject *id_obj;
    if (to_u64(s, id0, c[3], 10, &ident)) /* else negative, or not a number */
        id_obj = PyLong_FromUnsignedLongLong(ident);
    else { /* int() of anything else: signs, spaces, other digits */
        PyObject *t = str(s, id0, c[3]);
        id_obj = t ? PyLong_FromUnicodeObject(t, 10) : NULL;
        Py_XDECREF(t);
        if (!id_obj && PyErr_ExceptionMatches(PyExc_ValueError)) { PyErr_Clear(); return 0; }
    }
    if (!id_obj) return -1;
    PyObject *cost = NULL, *kernel = NULL;
    int r = 0, neg = PyObject_RichCompareBool(id_obj, Py_False, Py_LT); /* ident < 0 (False == 0) */
    if (neg == 0 && (cost = to_float(s, c[3] + 1, c[2]))) {
        r = 1;
        if (S->op.cands && PyList_GET_SIZE(S->op.cands) < MAX_CANDIDATES) {
            kernel = str_or_none(s, c[0] + 1, h);
            r = kernel ? make_candidate(S, S->op.cands, id_obj, tac, kernel, cost, Py_None) : -1;
            r = r < 0 ? -1 : 1;
        }
    }
    if (neg < 0 || (!cost && PyErr_Occurred())) r = -1;
    Py_DECREF(id_obj); Py_XDECREF(cost); Py_XDECREF(kernel);
    return r;
}
/* lines.op_header(s[a:b]): (name, key, keyed, onnx) as a new tuple. _OP_KEYED: the name
 * runs to the last "(key: " with a ")" after it; the key to that ")"; what follows, less
 * \s, one optional ':' and \s, is the suffix. A key that is not 0x + 32 hex digits is
 * dropped. Without "(key: ", "NAME: [ONNX Layer: ..]" or "NAME:". */
static PyObject *op_header(Scanner *S, U *s, Py_ssize_t a, Py_ssize_t b) {
    Py_ssize_t k = -1, c = -1, na, nb, sa, sb, ka, kb;
    strip(s, &a, &b);
    for (Py_ssize_t q = find(s, a, b, "(key: "); q >= 0; q = find(s, q + 1, b, "(key: ")) {
        U *close = memchr(s + q + 6, ')', (size_t)(b - q - 6));
        if (close) k = q, c = close - s;
    }
    PyObject *key = Py_NewRef(Py_None);
    int keyed = k >= 0;
    if (keyed) {
        na = a, nb = k, sa = c + 1, sb = b, ka = k + 6, kb = c;
        while (sa < sb && is_rs(s[sa])) sa++;
        if (sa < sb && s[sa] == ':') sa++;
        strip(s, &ka, &kb);
        if (kb - ka == 34 && s[ka] == '0' && (s[ka + 1] | 32) == 'x') {
            char low[34];
            int hex = 1;
            for (int d = 0; d < 34; d++) {
                low[d] = (char)lower(s[ka + d]);
                if (d >= 2 && !isxdigit(s[ka + d])) hex = 0;
            }
            if (hex) Py_SETREF(key, PyUnicode_DecodeASCII(low, 34, NULL));
        }
    } else if ((k = find(s, a, b, ": [")) >= 0) {
        na = a, nb = k, sa = k + 2, sb = b;
    } else {
        na = a, nb = b, sa = sb = b;
        while (nb > na && s[nb - 1] == ':') nb--;
    }
    strip(s, &na, &nb);
    strip(s, &sa, &sb);
    PyObject *name = str(s, na, nb), *r = NULL;
    PyObject *onnx = sa < sb && s[sa] == '[' ? split_onnx(S->hooks[H_SPLIT], s, sa, sb)
                                            : PyTuple_New(0);
    if (key && name && onnx) r = PyTuple_Pack(4, name, key, keyed ? Py_True : Py_False, onnx);
    Py_XDECREF(key); Py_XDECREF(name); Py_XDECREF(onnx);
    return r;
}
static int autotuning(Scanner *S, U *s, Py_ssize_t n) {
    Py_ssize_t i = find(s, 0, n, "Autotuning op "), a, b = n;
    if (i >= 0) {
        PyObject *t = op_header(S, s, i + 14, n);
        if (!t || flush_op(S) < 0) { Py_XDECREF(t); return -1; }
        S->op.name = Py_NewRef(PyTuple_GET_ITEM(t, 0));
        S->op.key = Py_NewRef(PyTuple_GET_ITEM(t, 1));
        S->op.keyed = PyObject_IsTrue(PyTuple_GET_ITEM(t, 2)), S->op.line = S->lineno;
        S->op.onnx = Py_NewRef(PyTuple_GET_ITEM(t, 3)), S->op.sel_cost = Py_NewRef(Py_None);
        Py_DECREF(t);
        return (S->op.cands = PyList_New(0)) ? 1 : -1;
    }
    int reformat = 0;
    if ((i = find(s, 0, n, "Autotuning format combination")) >= 0) a = i + 30;
    else if ((i = find(s, 0, n, "Autotuning Reformat")) >= 0) a = i + 19, reformat = 1;
    else return 0;
    if (a > n) a = n;
    PyObject *tail = NULL; /* line[i + 30:] skips a character: re-encode when it is not a byte */
    if (!reformat && a - 1 < n && s[a - 1] >= 0x80) {
        PyObject *t = str(s, a - 1, n);
        tail = t ? PyUnicode_Substring(t, 1, PY_SSIZE_T_MAX) : NULL;
        Py_XDECREF(t);
        const char *u = tail ? PyUnicode_AsUTF8AndSize(tail, &b) : NULL;
        if (!u) { Py_XDECREF(tail); return -1; }
        s = (U *)u, a = 0;
    }
    strip(s, &a, &b); /* .strip(WS).lstrip(":").strip(WS).rstrip("*").strip(WS) */
    while (a < b && s[a] == ':') a++;
    strip(s, &a, &b);
    while (b > a && s[b - 1] == '*') b--;
    strip(s, &a, &b);
    PyObject *formats = a < b ? str(s, a, b) : Py_NewRef(Py_None);
    Py_XDECREF(tail);
    if (flush_both(S) < 0 || clear_orphans(S) < 0) { Py_XDECREF(formats); return -1; }
    clear_pending(S);
    PyObject *layer = reformat ? PyUnicode_New(0, 0) : Py_NewRef(S->cur_layer);
    PyObject *cands = PyList_New(0);
    return blk_open(S, layer, formats, reformat, cands) < 0 ? -1 : 1;
}
/* lines.runner_parts: (layer, runner, reformat?) as a new tuple, or None. The runner is in
 * the last "(...)" that ends the line after a space, with no ")" inside. */
static PyObject *runner_parts(U *s, Py_ssize_t n) {
    Py_ssize_t i = find(s, 0, n, "Timing Runner: "), a, b, la, lb, o;
    if (i < 0) return Py_NewRef(Py_None);
    a = i + 15, b = n;
    strip(s, &a, &b);
    la = a, lb = b, o = -1;
    if (b > a && s[b - 1] == ')') {
        for (o = b - 2; o >= a && s[o] != '('; o--) {}
        if (o - a < 1 || s[o - 1] != ' ' || !no_byte(s, o + 1, b - 1, ')')) o = -1;
    }
    PyObject *runner = o >= 0 ? runner_name(s, o + 1, b - 1) : Py_NewRef(Py_None);
    if (o >= 0) {
        lb = o - 1;
        strip(s, &la, &lb);
    }
    PyObject *layer = str(s, la, lb), *r = NULL;
    int reformat = at(s, lb, la, "Optimizer Reformat");
    if (layer && runner) r = PyTuple_Pack(3, layer, runner, reformat ? Py_True : Py_False);
    Py_XDECREF(layer); Py_XDECREF(runner);
    return r;
}
static int timing_runner(Scanner *S, U *s, Py_ssize_t n) { /* (layer, runner, reformat?) */
    PARTS_OR_RETURN(t, runner_parts(s, n))
    PyObject *layer = PyTuple_GET_ITEM(t, 0);
    int r = flush_op(S);
    if (r == 0 && !S->blk.cands)
        r = open_implicit(S, layer, PyObject_IsTrue(PyTuple_GET_ITEM(t, 2)));
    if (r == 0 && !nonempty(S->blk.layer)) {
        Py_XSETREF(S->blk.layer, Py_NewRef(layer));
        attach_meta(S);
    }
    if (r == 0 && !S->blk.reformat && !nonempty(S->cur_layer))
        Py_SETREF(S->cur_layer, Py_NewRef(S->blk.layer));
    if (r == 0) Py_XSETREF(S->blk.runner, Py_NewRef(PyTuple_GET_ITEM(t, 1)));
    clear_pending(S);
    Py_DECREF(t);
    return r < 0 ? -1 : 1;
}
static int computing_costs(Scanner *S, U *s, Py_ssize_t n) {
    PyObject *name = stripped(s, find(s, 0, n, "Computing costs for") + 19, n);
    if (!name || flush_both(S) < 0 || clear_orphans(S) < 0) { Py_XDECREF(name); return -1; }
    Py_SETREF(S->cur_layer, name);
    Py_SETREF(S->set_layer, PyUnicode_New(0, 0));
    clear_pending(S);
    return 1;
}
/* (s[a:c] + " " + s[d:b]).strip(WS) as a str: a head with its key cut out */
static PyObject *joined(U *s, Py_ssize_t a, Py_ssize_t c, Py_ssize_t d, Py_ssize_t b) {
    if (a == c) return stripped(s, d, b);
    if (d == b) return stripped(s, a, c);
    unsigned char *buf = PyMem_Malloc((size_t)(c - a + 1 + b - d));
    if (!buf) return PyErr_NoMemory();
    memcpy(buf, s + a, (size_t)(c - a));
    buf[c - a] = ' ';
    memcpy(buf + (c - a) + 1, s + d, (size_t)(b - d));
    PyObject *r = stripped(buf, 0, c - a + 1 + b - d);
    PyMem_Free(buf);
    return r;
}
/* lines.cached_line: (layer, key, formats, tactic, runner, cost_ms) as a new tuple, or None.
 * _CACHED_TAIL: the runner runs to the first comma (less \s around it), then "tactic",
 * an optional ':', the tactic token, and an optional ", <time>" (less a trailing "ms"). */
static PyObject *cached_parts(Scanner *S, U *line, Py_ssize_t n) {
    Py_ssize_t n0 = n;
    U *s = message(line, &n);
    Py_ssize_t i = find(s, 0, n, "got cached result"), p, ra, rb, ta, tb, wa = 0, wb = 0;
    /* the words were inside a prefix: cached_line then cuts the message's last character
     * (s[:-1]), which is a byte only in ASCII, so that rare line goes to Python */
    if (i < 0) return call_line(S, H_CACHED, line, n0);
    p = i + 17 < n ? i + 17 : n;
    while (p < n && s[p] == ':') p++;
    while (p < n && is_rs(s[p])) p++;
    ra = p;
    U *comma = p < n ? memchr(s + p, ',', (size_t)(n - p)) : NULL;
    if (!comma) return Py_NewRef(Py_None);
    rb = comma - s;
    while (rb > ra && is_rs(s[rb - 1])) rb--;
    for (p = comma - s + 1; p < n && is_rs(s[p]); p++) {}
    if (!at(s, n, p, "tactic")) return Py_NewRef(Py_None);
    p += 6;
    if (p < n && s[p] == ':') p++;
    for (; p < n && is_rs(s[p]); p++) {}
    ta = p, tb = token_end(s, p, n);
    if (tb == ta) return Py_NewRef(Py_None); /* also when ':' would be the token: no tactic */
    for (p = tb; p < n && is_rs(s[p]); p++) {}
    if (p < n && s[p] == ',') {
        for (p++; p < n && is_rs(s[p]); p++) {}
        wa = p, wb = token_end(s, p, n);
        if (wb - wa >= 2 && s[wb - 2] == 'm' && s[wb - 1] == 's') wb -= 2;
    }
    PyObject *tac = tactic_obj(S->hooks[H_TAC], s, ta, tb);
    if (!tac || tac == Py_None) return tac;
    Py_ssize_t ha = 0, hb = i, k;
    strip(s, &ha, &hb);
    PyObject *formats = Py_NewRef(Py_None), *key = Py_NewRef(Py_None), *head = NULL;
    if (hb > ha && s[hb - 1] == ']' && (k = rfind(s, ha, hb, " [")) >= 0) {
        Py_SETREF(formats, stripped(s, k + 2, hb - 1));
        hb = k;
        strip(s, &ha, &hb);
    }
    for (k = find(s, ha, hb, "(key: "); k >= 0; k = find(s, k + 1, hb, "(key: ")) {
        Py_ssize_t h = k + 8, e = k + 6 + 34; /* "0x" + 32 hex digits + ")" */
        if (e >= hb || s[k + 6] != '0' || (s[k + 7] | 32) != 'x' || s[e] != ')') continue;
        while (h < e && isxdigit(s[h])) h++;
        if (h < e) continue;
        char low[34];
        for (int d = 0; d < 34; d++) low[d] = (char)lower(s[k + 6 + d]);
        Py_SETREF(key, PyUnicode_DecodeASCII(low, 34, NULL));
        Py_ssize_t a = k, b = e + 1;
        while (a > ha && is_rs(s[a - 1])) a--;
        while (b < hb && is_rs(s[b])) b++;
        head = joined(s, ha, a, b, hb);
        break;
    }
    if (!head) head = str(s, ha, hb);
    PyObject *runner = rb > ra ? str(s, ra, rb) : Py_NewRef(Py_None), *cost = NULL, *t = NULL;
    if (wb > wa) {
        while (wb > wa && s[wb - 1] == ';') wb--; /* values.to_float: .rstrip(",;") */
        cost = to_float(s, wa, wb);
    }
    if (!cost && !PyErr_Occurred()) cost = Py_NewRef(Py_None);
    if (formats && key && head && runner && cost)
        t = PyTuple_Pack(6, head, key, formats, tac, runner, cost);
    Py_DECREF(tac); Py_XDECREF(formats); Py_XDECREF(key); Py_XDECREF(head);
    Py_XDECREF(runner); Py_XDECREF(cost);
    return t;
}
static int cached(Scanner *S, U *s, Py_ssize_t n) {
    PARTS_OR_RETURN(c, cached_parts(S, s, n)) /* (layer, key, formats, tactic, runner, cost) */
    PyObject *layer = PyTuple_GET_ITEM(c, 0), *key = PyTuple_GET_ITEM(c, 1);
    int r = flush_both(S);
    if (r == 0 && (nonempty(layer) || key != Py_None)) {
        PyObject *onnx = S->meta_node && eq(S->meta_node, layer) > 0 ? Py_NewRef(S->meta_onnx)
                                                                       : PyTuple_New(0);
        PyObject *cands = PyList_New(0), *v[9] = {layer, key, onnx, cands, PyTuple_GET_ITEM(c, 3),
                                                   Py_None, PyTuple_GET_ITEM(c, 5), NULL,
                                                   PyTuple_GET_ITEM(c, 4)};
        r = onnx && cands ? emit(S, v, 1, S->lineno, "cached", PyTuple_GET_ITEM(c, 2)) : -1;
        Py_XDECREF(onnx); Py_XDECREF(cands);
    }
    Py_DECREF(c);
    return r < 0 ? -1 : 1;
}
static int cache_line(Scanner *S, U *s, Py_ssize_t n) {
    if (find(s, 0, n, "got cached result") >= 0) return cached(S, s, n);
    if (find(s, 0, n, "Writing the best tactic") >= 0) {
        PyObject *t = call_line(S, H_WRITING, s, n);
        if (!t) return -1;
        int r = 0;
        if (t != Py_None && S->op.cands) {
            PyObject *tac = PyTuple_GET_ITEM(t, 0);
            Py_XSETREF(S->op.written, tac == Py_None ? NULL : Py_NewRef(tac));
            r = flush_op(S);
        }
        Py_DECREF(t);
        return r < 0 ? -1 : 1;
    }
    const char *kind = warning_kind(s, n);
    if (!kind) return 0;
    Py_ssize_t a, b;
    strip_prefix(s, n, &a, &b);
    return warn(S, kind, str(s, a, b)) < 0 ? -1 : 1;
}
/* lines.selected_parts: (tactic, time) as a new tuple, or None. SELECTED.search: the first
 * "(tactic hash, cost(in ms)):" followed by a token, an optional ", <time>" after it. */
static PyObject *selected_parts(Scanner *S, U *s, Py_ssize_t n) {
    static const char LIT[] = "(tactic hash, cost(in ms)):";
    Py_ssize_t ta = 0, tb = 0, wa = 0, wb = 0, q, p;
    for (q = find(s, 0, n, LIT); q >= 0; q = find(s, q + 1, n, LIT)) {
        for (p = q + 27; p < n && is_rs(s[p]); p++) {}
        ta = p, tb = token_end(s, p, n);
        if (tb > ta) break;
    }
    if (q < 0) return Py_NewRef(Py_None);
    for (p = tb; p < n && is_rs(s[p]); p++) {}
    if (p < n && s[p] == ',') {
        for (p++; p < n && is_rs(s[p]); p++) {}
        wa = p, wb = token_end(s, p, n);
    }
    PyObject *tac = tactic_obj(S->hooks[H_TAC], s, ta, tb);
    if (!tac || tac == Py_None) return tac;
    while (wb > wa && s[wb - 1] == ';') wb--; /* values.to_float: .rstrip(",;") */
    PyObject *time = wb > wa ? to_float(s, wa, wb) : NULL, *r = NULL;
    if (!time && !PyErr_Occurred()) time = Py_NewRef(Py_None);
    if (time) r = PyTuple_Pack(2, tac, time);
    Py_DECREF(tac); Py_XDECREF(time);
    return r;
}
static int selected(Scanner *S, U *s, Py_ssize_t n) {
    if (!S->op.cands) return 1;
    PARTS_OR_RETURN(t, selected_parts(S, s, n))
    Py_XSETREF(S->op.sel, Py_NewRef(PyTuple_GET_ITEM(t, 0)));
    Py_XSETREF(S->op.sel_cost, Py_NewRef(PyTuple_GET_ITEM(t, 1)));
    Py_DECREF(t);
    return 1;
}

/* lines.layer_line: "Layer(<Type>): <name>, Tactic: 0x.., <in> -> <out>" */
static int layer_line(Scanner *S, U *line, Py_ssize_t n) {
    U *s = message(line, &n);
    if (!at(s, n, 0, "Layer(")) return 0;
    Py_ssize_t close = find(s, 6, n, ")");
    if (close < 0 || !at(s, n, close + 1, ":")) return 0;
    Py_ssize_t p = close + 2, comma, ta = 0, tb = 0;
    while (p < n && is_rs(s[p])) p++;
    comma = find(s, p, n, ",");
    if (comma < 0) comma = n;
    else if (at(s, n, comma, ", Tactic: ")) {
        for (ta = tb = comma + 10; tb < n && s[tb] != ',' && !is_rs(s[tb]); tb++) {}
    }
    PyObject *name = stripped(s, p, comma);
    PyObject *type = close > 6 ? str(s, 6, close) : Py_NewRef(Py_None);
    PyObject *tv = tb > ta ? tactic_obj(S->hooks[H_TAC], s, ta, tb) : Py_NewRef(Py_None);
    PyObject *empty = PyTuple_New(0), *args[5] = {name, type, Py_None, tv, empty};
    int r = name && type && tv && empty ? add_engine_layer(S, args) : -1;
    Py_XDECREF(name); Py_XDECREF(type); Py_XDECREF(tv); Py_XDECREF(empty);
    return r < 0 ? -1 : 1;
}

/* lines.oneline_layer: "Name: .., LayerType: .., [TacticName: .., TacticValue: .., ..]" */
static int oneline(Scanner *S, U *line, Py_ssize_t n) {
    U *s = message(line, &n);
    Py_ssize_t i = find(s, 0, n, ", LayerType: "), j, k, e;
    if (!at(s, n, 0, "Name: ") || i < 0) return 0;
    j = find(s, i + 13, n, ",");
    PyObject *name = stripped(s, 6, i), *type = str_or_none(s, i + 13, j < 0 ? n : j);
    PyObject *tname = Py_NewRef(Py_None), *tv = Py_NewRef(Py_None), *md = NULL;
    if ((k = find(s, 0, n, ", TacticName: ")) >= 0) {
        e = find(s, k + 14, n, ",");
        Py_SETREF(tname, str_or_none(s, k + 14, e < 0 ? n : e));
    }
    for (k = find(s, 0, n, ", TacticValue: "); k >= 0; k = find(s, k + 1, n, ", TacticValue: ")) {
        for (e = k + 15; e < n && s[e] != ',' && !is_rs(s[e]); e++) {}
        if (e > k + 15) { /* first occurrence with a non-empty value, as re.search finds */
            Py_SETREF(tv, tactic_obj(S->hooks[H_TAC], s, k + 15, e));
            break;
        }
    }
    k = find(s, 0, n, ", Metadata:");
    md = k >= 0 ? split_onnx(S->hooks[H_SPLIT], s, k + 11, n) : PyTuple_New(0);
    PyObject *args[5] = {name, type, tname, tv, md};
    int r = name && type && tname && tv && md ? add_engine_layer(S, args) : -1;
    Py_XDECREF(name); Py_XDECREF(type); Py_XDECREF(tname); Py_XDECREF(tv); Py_XDECREF(md);
    return r < 0 ? -1 : 1;
}
static int layer_misc(Scanner *S, U *line, Py_ssize_t n0) {
    Py_ssize_t n = n0, p;
    U *s = message(line, &n);
    if (at(s, n, 0, "Engine Layer Information") || (n == 7 && at(s, n, 0, "Layers:")))
        return new_layers(S) < 0 ? -1 : 1;
    if (at(s, n, 0, "ForeignNode ") && find(s, 0, n, " metadata: ") >= 0) {
        if ((p = find(s, 12, n, " metadata: ")) < 0) return 1;
        PyObject *node = stripped(s, 12, p), *onnx = split_onnx(S->hooks[H_SPLIT], s, p + 11, n);
        if (!node || !onnx) { Py_XDECREF(node); Py_XDECREF(onnx); return -1; }
        Py_XSETREF(S->meta_node, node);
        Py_XSETREF(S->meta_onnx, onnx);
        if (S->blk.cands) attach_meta(S);
        return 1;
    }
    if (at(s, n, 0, "Layer(")) return layer_line(S, line, n0);
    if (at(s, n, 0, "Name: ")) return oneline(S, line, n0);
    return 1;
}

/* LogParser._line: the trigger words in its order */
static int process_line(Scanner *S, U *s, Py_ssize_t n) {
    int r;
    S->lineno++;
    if (n && s[n - 1] == '\r') n--;
    if (n >= 2 && s[0] == '#' && s[1] == ' ') return separator(S);
    if (trig(s, n, T_TACTIC) && (r = tactic_family(S, s, n))) return r;
    if (S->op.cands && trig(s, n, T_ROW) && (r = row(S, s, n))) return r;
    if (trig(s, n, T_AUTOTUNING) && (r = autotuning(S, s, n))) return r;
    if (trig(s, n, T_TIMING) && (r = timing_runner(S, s, n))) return r;
    if (trig(s, n, T_COMPUTING)) return computing_costs(S, s, n);
    if (trig(s, n, T_ACHE) && (r = cache_line(S, s, n))) return r;
    if (trig(s, n, T_HASH)) return selected(S, s, n);
    if (trig(s, n, T_LAYER)) return layer_misc(S, s, n);
    return 0;
}

/* ---- the Scanner type ---------------------------------------------------------------------- */
static int sync_parser(Scanner *S) {
    PyObject *ln = PyLong_FromSsize_t(S->lineno), *wd = PyLong_FromSsize_t(S->dropped);
    int r = ln && wd && PyObject_SetAttrString(S->parser, "lineno", ln) == 0 &&
                    PyObject_SetAttrString(S->parser, "warnings_dropped", wd) == 0 &&
                    PyObject_SetAttrString(S->parser, "engine_layers", S->engine_layers) == 0
                ? 0 : -1;
    Py_XDECREF(ln); Py_XDECREF(wd);
    return r;
}
static PyObject *take_out(Scanner *S) {
    PyObject *out = S->out;
    if (!(S->out = PyList_New(0))) { S->out = out; return NULL; }
    return out;
}
static int carry_add(Scanner *S, U *p, Py_ssize_t len) {
    if (S->ncarry + len > MAX_LINE) len = MAX_LINE - S->ncarry; /* cut very long lines */
    if (len <= 0) return 0;
    if (S->ncarry + len > S->capcarry) {
        Py_ssize_t cap = S->capcarry ? S->capcarry : 4096;
        while (cap < S->ncarry + len) cap *= 2;
        unsigned char *nc = PyMem_Realloc(S->carry, (size_t)cap);
        if (!nc) { PyErr_NoMemory(); return -1; }
        S->carry = nc, S->capcarry = cap;
    }
    memcpy(S->carry + S->ncarry, p, (size_t)len);
    S->ncarry += len;
    return 0;
}
static PyObject *Scanner_feed(Scanner *S, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    int gc_was_on = PyGC_Disable(); /* records are acyclic: collecting only costs time */
    U *data = view.buf;
    Py_ssize_t n = view.len, pos = 0;
    int err = 0;
    while (!err && pos < n) {
        U *nl = memchr(data + pos, '\n', (size_t)(n - pos));
        if (!nl) { err = carry_add(S, data + pos, n - pos) < 0; break; }
        Py_ssize_t end = nl - data;
        if (S->ncarry) {
            err = carry_add(S, data + pos, end - pos) < 0 ||
                  process_line(S, S->carry, S->ncarry) < 0;
            S->ncarry = 0;
        } else { err = process_line(S, data + pos, end - pos) < 0; }
        pos = end + 1;
    }
    PyBuffer_Release(&view);
    if (gc_was_on) PyGC_Enable();
    if (err || sync_parser(S) < 0) return NULL;
    return take_out(S);
}
static PyObject *Scanner_finish(Scanner *S, PyObject *Py_UNUSED(ignored)) {
    Py_ssize_t len = S->ncarry;
    S->ncarry = 0;
    if ((len && process_line(S, S->carry, len) < 0) || flush_both(S) < 0 || sync_parser(S) < 0 ||
        (S->write && j_flush(S) < 0))
        return NULL;
    return take_out(S);
}
static int Scanner_init(Scanner *S, PyObject *args, PyObject *kwds) {
    PyObject *parser, *hooks, *write = Py_None, *record_text = Py_None;
    Py_ssize_t max_warnings;
    if (!PyArg_ParseTuple(args, "OO!n|OO:Scanner", &parser, &PyTuple_Type, &hooks, &max_warnings,
                          &write, &record_text))
        return -1;
    if ((write == Py_None) != (record_text == Py_None) ||
        (write != Py_None && (!PyCallable_Check(write) || !PyCallable_Check(record_text)))) {
        PyErr_SetString(PyExc_TypeError, "JSON mode takes both write and record_text callables");
        return -1;
    }
    PyObject *cand = PyTuple_GET_SIZE(hooks) == H_COUNT ? PyTuple_GET_ITEM(hooks, H_CAND) : NULL;
    if (!cand || !PyType_Check(cand) || !PyType_IsSubtype((PyTypeObject *)cand, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "hooks: see logs/reader.py (Candidate a NamedTuple)");
        return -1;
    }
    for (int h = H_WARNING_FIELDS; h <= H_LAYER_FIELDS; h++) {
        PyObject *r = PyTuple_GET_ITEM(hooks, h);
        PyObject *cls = PyTuple_GET_ITEM(hooks, h == H_WARNING_FIELDS ? H_WARNING : H_LAYER);
        Py_ssize_t given = h == H_WARNING_FIELDS ? 3 : 5;
        if (r == Py_None) continue;
        if (!PyType_Check(cls) || !PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2 ||
            !PyTuple_Check(PyTuple_GET_ITEM(r, 0)) || !PyTuple_Check(PyTuple_GET_ITEM(r, 1)) ||
            PyTuple_GET_SIZE(PyTuple_GET_ITEM(r, 0)) !=
                given + PyTuple_GET_SIZE(PyTuple_GET_ITEM(r, 1))) {
            PyErr_SetString(PyExc_TypeError, "hooks: a dataclass recipe is (names, defaults)");
            return -1;
        }
    }
    PyObject *warnings = PyObject_GetAttrString(parser, "warnings");
    PyObject *layers = PyObject_GetAttrString(parser, "engine_layers");
    if (!warnings || !layers || !PyList_Check(warnings)) {
        if (warnings && layers) PyErr_SetString(PyExc_TypeError, "parser.warnings must be a list");
        Py_XDECREF(warnings); Py_XDECREF(layers);
        return -1;
    }
    Py_XSETREF(S->parser, Py_NewRef(parser));
    for (int i = 0; i < H_COUNT; i++)
        Py_XSETREF(S->hooks[i], Py_NewRef(PyTuple_GET_ITEM(hooks, i)));
    Py_XSETREF(S->warnings, warnings);
    Py_XSETREF(S->engine_layers, layers);
    S->max_warnings = max_warnings;
    Py_CLEAR(S->write); Py_CLEAR(S->record_text);
    if (write != Py_None) S->write = Py_NewRef(write), S->record_text = Py_NewRef(record_text);
    Py_XSETREF(S->out, PyList_New(0));
    Py_XSETREF(S->orphans, PyList_New(0));
    Py_XSETREF(S->cur_layer, PyUnicode_New(0, 0));
    Py_XSETREF(S->set_layer, PyUnicode_New(0, 0));
    return S->out && S->orphans && S->cur_layer && S->set_layer ? 0 : -1;
}
static int Scanner_traverse(Scanner *S, visitproc visit, void *arg) {
    Py_VISIT(S->parser);
    for (int i = 0; i < H_COUNT; i++) Py_VISIT(S->hooks[i]);
    Py_VISIT(S->write); Py_VISIT(S->record_text);
    Py_VISIT(S->out); Py_VISIT(S->warnings); Py_VISIT(S->engine_layers); Py_VISIT(S->orphans);
    Py_VISIT(S->blk.cands); Py_VISIT(S->op.cands);
    return 0;
}
static int Scanner_clear(Scanner *S) {
    for (int i = 0; i < H_COUNT; i++) Py_CLEAR(S->hooks[i]);
    Py_CLEAR(S->parser);
    Py_CLEAR(S->write); Py_CLEAR(S->record_text);
    Py_CLEAR(S->out); Py_CLEAR(S->warnings); Py_CLEAR(S->engine_layers); Py_CLEAR(S->orphans);
    Py_CLEAR(S->cur_layer); Py_CLEAR(S->set_layer); Py_CLEAR(S->meta_node); Py_CLEAR(S->meta_onnx);
    clear_pending(S);
    blk_clear(&S->blk);
    op_clear(&S->op);
    return 0;
}
static void Scanner_dealloc(Scanner *S) {
    PyObject_GC_UnTrack(S);
    Scanner_clear(S);
    PyMem_Free(S->carry);
    PyMem_Free(S->jbuf);
    Py_TYPE(S)->tp_free((PyObject *)S);
}
static PyMethodDef Scanner_methods[] = {
    {"feed", (PyCFunction)Scanner_feed, METH_O, "feed(bytes) -> records the chunk completed"},
    {"finish", (PyCFunction)Scanner_finish, METH_NOARGS, "finish() -> records open at the end"},
    {NULL, NULL, 0, NULL},
};
static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "reprobuild.logs._logscan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Scanner(parser, hooks, max_warnings[, write, record_text]): LogParser's state "
              "machine over byte chunks; with write, records go out as `log --json` text.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_traverse = (traverseproc)Scanner_traverse,
    .tp_clear = (inquiry)Scanner_clear,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
};
static struct PyModuleDef logscan_module = {
    PyModuleDef_HEAD_INIT, "_logscan", "C scanner for TensorRT builder logs (logs/reader.py).",
    -1, NULL, NULL, NULL, NULL, NULL,
};
PyMODINIT_FUNC PyInit__logscan(void) {
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&logscan_module);
    if (m && PyModule_AddObjectRef(m, "Scanner", (PyObject *)&ScannerType) < 0) Py_CLEAR(m);
    return m;
}
