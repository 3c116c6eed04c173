/* The decoder's compiled fast path: one capture line (bytes) -> (seq, record), or None.
 *
 * Why: `replay check` must read >= 200k records/s (issue 15). In Python every line is parsed into a
 * dict (orjson) and then decoded by a generated function per line shape (replay/capture/shapes.py):
 * ~21k instructions a record, half of the command's work. This does both in one pass over the bytes
 * and stores the values straight into the record's slots.
 *
 * What it knows: nothing of its own. Python registers each shape (the line's keys, in order) with a
 * plan built from the very tables the Python fast path is generated from (shapes.c_plan): per key its
 * role, the slot it fills, the JSON types it may have, its literal values or deep check; per field
 * the value an omitted field reads as; the sticky fields of an `s2c` message. It accepts a line only
 * when it is sure of the answer; anything else (a shape not registered, an escape or a non-ASCII
 * byte in a key, invalid JSON, a failed check...) returns None and the Python path decodes the line,
 * which also raises the one error a bad line deserves. tests/replay/capture/test_lines.py holds it
 * equal to the Python path with Hypothesis.
 *
 * Pure: no I/O, no state but the shapes table and the caller's sticky dict.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>

#include "../_slots.h"

#define MAX_KEYS 40
#define MAX_FIELDS 40
#define MAX_STICKY 8
#define TABLE_SIZE 1024 /* open addressing; Python keeps at most 256 shapes */

enum { R_SKIP = 0, R_V = 1, R_SEQ = 2, R_KIND = 3, R_FIELD = 4 };

/* JSON types, as bits of a field's allowed mask */
#define B_INT 1
#define B_STR 2
#define B_BOOL 4
#define B_NONE 8
#define B_FLOAT 16
#define B_LIST 32
#define B_DICT 64

typedef struct {
    int role;
    int field;         /* R_FIELD: index into the shape's fields */
    int mask;          /* allowed JSON types */
    PyObject *oneof;   /* a frozenset of literal values, or NULL */
    PyObject *deep;    /* a deep check (None: fine), or NULL */
    int tensor_list;   /* checked and built from its JSON text by the shape's to_specs instead */
} Key;

typedef struct {
    char *sig; /* the keys joined by NUL bytes */
    Py_ssize_t siglen;
    uint64_t hash;
    int nkeys;
    Key keys[MAX_KEYS];
    int nfields;
    Py_ssize_t offset[MAX_FIELDS];   /* the slot of each field in the record */
    PyObject *omitted[MAX_FIELDS];   /* what an omitted field reads as; NULL when the line has it */
    int from_key[MAX_FIELDS];        /* the line's key giving the field, or -1 */
    PyTypeObject *cls;
    PyObject *kind;
    long version;
    PyObject *to_specs;
    int nsticky;
    int sticky_field[MAX_STICKY];
    int sticky_in_line[MAX_STICKY];
    int call_key, dir_key; /* -1 when absent */
    int forget;
} Shape;

#define STRINGS 512   /* the string cache's entries (direct-mapped) */
#define STRING_MAX 64 /* longer strings are not kept */

typedef struct {
    PyObject_HEAD
    Shape *slots[TABLE_SIZE];
    int count;
    PyObject *loads; /* orjson.loads: values this parser leaves to it (escapes, floats, nested) */
    /* Recent string values (call ids, "s2c", "message"...): the same bytes give the same str,
     * whose hash is then computed once, not once a line for each set and dict it meets. */
    PyObject *strings[STRINGS];
} Table;

static uint64_t fnv(uint64_t h, const char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static void shape_free(Shape *s) {
    if (s == NULL) return;
    for (int i = 0; i < s->nkeys; i++) {
        Py_XDECREF(s->keys[i].oneof);
        Py_XDECREF(s->keys[i].deep);
    }
    for (int i = 0; i < s->nfields; i++) Py_XDECREF(s->omitted[i]);
    Py_XDECREF(s->cls);
    Py_XDECREF(s->kind);
    Py_XDECREF(s->to_specs);
    PyMem_Free(s->sig);
    PyMem_Free(s);
}

static void table_clear_shapes(Table *t) {
    for (int i = 0; i < TABLE_SIZE; i++) {
        shape_free(t->slots[i]);
        t->slots[i] = NULL;
    }
    t->count = 0;
}

static void table_dealloc(Table *t) {
    table_clear_shapes(t);
    for (int i = 0; i < STRINGS; i++) Py_CLEAR(t->strings[i]);
    Py_XDECREF(t->loads);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyObject *table_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *loads;
    if (!PyArg_ParseTuple(args, "O:Table", &loads)) return NULL;
    Table *t = (Table *)type->tp_alloc(type, 0);
    if (t == NULL) return NULL;
    Py_INCREF(loads);
    t->loads = loads;
    return (PyObject *)t;
}

/* ---- registration: Table.add(keys, plan) ---- */

static int plain_key(PyObject *k, const char **p, Py_ssize_t *n) {
    if (!PyUnicode_CheckExact(k) || !PyUnicode_IS_ASCII(k)) return 0;
    *p = (const char *)PyUnicode_1BYTE_DATA(k);
    *n = PyUnicode_GET_LENGTH(k);
    for (Py_ssize_t i = 0; i < *n; i++) {
        unsigned char c = (unsigned char)(*p)[i];
        if (c < 0x20 || c == '"' || c == '\\' || c > 0x7e) return 0;
    }
    return 1;
}


/* plan: (cls, kind, version, to_specs, roles, fields, sticky, call_key, dir_key, forget)
 *   to_specs: a tensor list's JSON text (bytes) -> its specs, or None when it is not a valid one
 *   roles:  per key (role, field, mask, oneof|None, deep|None, tensor_list)
 *   fields: per field (member descriptor, omitted value or a marker, from_key)
 *   sticky: per sticky field (field, in_line)
 * Returns True when the shape was taken. A plan that does not fit its class or its keys (a slot of
 * another class, an index past the keys or the fields) is a TypeError or ValueError: decode fills
 * records by offset and reads the line's values by these indexes (lines.plan makes none such). */
static PyObject *table_add(Table *t, PyObject *args) {
    PyObject *keys, *plan;
    if (!PyArg_ParseTuple(args, "O!O!:add", &PyTuple_Type, &keys, &PyTuple_Type, &plan)) return NULL;
    PyObject *cls, *kind, *to_specs, *roles, *fields, *sticky;
    long version;
    int call_key, dir_key, forget;
    if (!PyArg_ParseTuple(plan, "O!UlOO!O!O!iip:plan", &PyType_Type, &cls, &kind, &version, &to_specs,
                          &PyTuple_Type, &roles, &PyTuple_Type, &fields, &PyTuple_Type, &sticky, &call_key,
                          &dir_key, &forget))
        return NULL;
    Py_ssize_t nkeys = PyTuple_GET_SIZE(keys);
    if (nkeys > MAX_KEYS || PyTuple_GET_SIZE(roles) != nkeys || PyTuple_GET_SIZE(fields) > MAX_FIELDS ||
        PyTuple_GET_SIZE(sticky) > MAX_STICKY || t->count >= TABLE_SIZE / 2)
        Py_RETURN_FALSE;
    Shape *s = PyMem_Calloc(1, sizeof(Shape));
    if (s == NULL) return PyErr_NoMemory();
    Py_ssize_t siglen = 0;
    for (Py_ssize_t i = 0; i < nkeys; i++) {
        const char *p;
        Py_ssize_t n;
        if (!plain_key(PyTuple_GET_ITEM(keys, i), &p, &n)) {
            PyMem_Free(s);
            Py_RETURN_FALSE; /* a key a line would escape: such lines go the Python way */
        }
        siglen += n + 1;
    }
    s->sig = PyMem_Malloc(siglen + 1);
    if (s->sig == NULL) {
        PyMem_Free(s);
        return PyErr_NoMemory();
    }
    char *w = s->sig;
    s->hash = 14695981039346656037ULL;
    for (Py_ssize_t i = 0; i < nkeys; i++) {
        const char *p;
        Py_ssize_t n;
        plain_key(PyTuple_GET_ITEM(keys, i), &p, &n);
        memcpy(w, p, n);
        w[n] = '\0';
        s->hash = fnv(s->hash, w, n + 1);
        w += n + 1;
    }
    s->siglen = siglen;
    s->nkeys = (int)nkeys;
    Py_INCREF(cls);
    s->cls = (PyTypeObject *)cls;
    Py_INCREF(kind);
    s->kind = kind;
    Py_INCREF(to_specs);
    s->to_specs = to_specs;
    s->version = version;
    s->call_key = call_key;
    s->dir_key = dir_key;
    s->forget = forget;
    for (Py_ssize_t i = 0; i < nkeys; i++) {
        Key *k = &s->keys[i];
        PyObject *oneof, *deep;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(roles, i), "iiiOOp:role", &k->role, &k->field, &k->mask, &oneof,
                              &deep, &k->tensor_list))
            goto fail;
        if (oneof != Py_None) {
            Py_INCREF(oneof);
            k->oneof = oneof;
        }
        if (deep != Py_None) {
            Py_INCREF(deep);
            k->deep = deep;
        }
    }
    s->nfields = (int)PyTuple_GET_SIZE(fields);
    for (int i = 0; i < s->nfields; i++) {
        PyObject *descr, *omitted;
        int from_key;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(fields, i), "OOi:field", &descr, &omitted, &from_key)) goto fail;
        /* of `cls` itself and within its instances (replay/_slots.h): the record is filled by offset */
        s->offset[i] = plain_slot(descr, (PyTypeObject *)cls);
        if (s->offset[i] < 0) {
            PyErr_SetString(PyExc_TypeError, "a field is not an object slot of the record class");
            goto fail;
        }
        if (from_key >= nkeys) {
            PyErr_Format(PyExc_ValueError, "plan: field %d is read from key %d of %zd", i, from_key, nkeys);
            goto fail;
        }
        s->from_key[i] = from_key;
        if (from_key < 0) {
            Py_INCREF(omitted);
            s->omitted[i] = omitted;
        }
    }
    s->nsticky = (int)PyTuple_GET_SIZE(sticky);
    for (int i = 0; i < s->nsticky; i++) {
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(sticky, i), "ip:sticky", &s->sticky_field[i], &s->sticky_in_line[i]))
            goto fail;
        if (s->sticky_field[i] < 0 || s->sticky_field[i] >= s->nfields) {
            PyErr_Format(PyExc_ValueError, "plan: sticky field %d of %d", s->sticky_field[i], s->nfields);
            goto fail;
        }
    }
    /* build() reads the line's call and dir values by these indexes: a line with sticky fields needs
     * both, one that forgets them the call (lines.plan declines shapes without them) */
    if ((s->nsticky && (dir_key < 0 || dir_key >= nkeys)) || ((s->nsticky || forget) && (call_key < 0 || call_key >= nkeys))) {
        PyErr_Format(PyExc_ValueError, "plan: call key %d, dir key %d of %zd", call_key, dir_key, nkeys);
        goto fail;
    }
    uint64_t h = s->hash;
    for (;;) {
        Shape **slot = &t->slots[h % TABLE_SIZE];
        if (*slot == NULL) {
            *slot = s;
            t->count++;
            Py_RETURN_TRUE;
        }
        if ((*slot)->siglen == s->siglen && memcmp((*slot)->sig, s->sig, s->siglen) == 0) {
            shape_free(s); /* already there */
            Py_RETURN_TRUE;
        }
        h++;
    }
fail:
    shape_free(s);
    return NULL;
}

/* ---- decoding ---- */

#define BAIL ((PyObject *)1) /* not sure of the answer: the Python path decodes the line */

static inline const char *ws(const char *p, const char *e) {
    /* (the first test settles the usual case, a token right there) */
    while (p < e && (unsigned char)*p <= ' ' && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
    return p;
}

/* The end of the JSON value starting at p (a string, number, array or object), for orjson. */
static const char *extent(const char *p, const char *e) {
    if (*p == '"') {
        for (p++; p < e; p++) {
            if (*p == '\\') p++;
            else if (*p == '"') return p + 1;
        }
        return NULL;
    }
    if (*p == '[' || *p == '{') {
        int depth = 0;
        for (; p < e; p++) {
            char c = *p;
            if (c == '"') {
                for (p++; p < e && *p != '"'; p++)
                    if (*p == '\\') p++;
                if (p >= e) return NULL;
            } else if (c == '[' || c == '{') {
                depth++;
            } else if (c == ']' || c == '}') {
                if (--depth == 0) return p + 1;
            }
        }
        return NULL;
    }
    while (p < e && ((*p >= '0' && *p <= '9') || *p == '-' || *p == '+' || *p == '.' || *p == 'e' || *p == 'E')) p++;
    return p;
}

/* One value at *pp: a new reference, BAIL, or NULL with an exception set. */
static PyObject *value(Table *t, const char **pp, const char *e) {
    const char *p = *pp;
    char c = *p;
    if (c == '"') {
        const char *q = p + 1;
        while (q < e && (unsigned char)*q >= 0x20 && *q != '"' && *q != '\\' && (unsigned char)*q < 0x80) q++;
        if (q < e && *q == '"') {
            Py_ssize_t n = q - p - 1;
            PyObject **slot = NULL;
            if (n <= STRING_MAX) {
                slot = &t->strings[fnv(14695981039346656037ULL, p + 1, n) % STRINGS];
                PyObject *known = *slot;
                if (known != NULL && PyUnicode_GET_LENGTH(known) == n && memcmp(PyUnicode_1BYTE_DATA(known), p + 1, n) == 0) {
                    *pp = q + 1;
                    Py_INCREF(known);
                    return known;
                }
            }
            PyObject *s = PyUnicode_New(n, 127);
            if (s == NULL) return NULL;
            memcpy(PyUnicode_1BYTE_DATA(s), p + 1, n);
            if (slot != NULL) {
                Py_INCREF(s);
                Py_XSETREF(*slot, s);
            }
            *pp = q + 1;
            return s;
        }
        if (q >= e || (unsigned char)*q < 0x20) return BAIL;
        /* an escape or a non-ASCII byte: orjson reads it */
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        const char *q = p;
        int neg = 0;
        if (*q == '-') {
            neg = 1;
            q++;
        }
        const char *digits = q;
        unsigned long long v = 0; /* 19 digits fit: every int64 (t_ns has 19) */
        const char *lim = e - q > 19 ? q + 19 : e;
        while (q < lim && (unsigned char)(*q - '0') < 10) v = v * 10 + (unsigned long long)(*q++ - '0');
        Py_ssize_t nd = q - digits;
        if (nd > 0 && !(nd > 1 && *digits == '0') && !(neg && v == 0) &&
            (q >= e || !((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E'))) {
            if (!neg && v <= (unsigned long long)LLONG_MAX) {
                *pp = q;
                return PyLong_FromLongLong((long long)v);
            }
            if (neg && v <= (unsigned long long)LLONG_MAX) {
                *pp = q;
                return PyLong_FromLongLong(-(long long)v);
            }
        }
        /* a fraction, an exponent, beyond int64, or a malformed number: orjson reads it (or refuses) */
    } else if (c == 't' && e - p >= 4 && memcmp(p, "true", 4) == 0) {
        *pp = p + 4;
        Py_RETURN_TRUE;
    } else if (c == 'f' && e - p >= 5 && memcmp(p, "false", 5) == 0) {
        *pp = p + 5;
        Py_RETURN_FALSE;
    } else if (c == 'n' && e - p >= 4 && memcmp(p, "null", 4) == 0) {
        *pp = p + 4;
        Py_RETURN_NONE;
    } else {
        return BAIL; /* (arrays and objects are not read here: see table_decode) */
    }
    const char *end = extent(p, e);
    if (end == NULL || end == p) return BAIL;
    PyObject *bytes = PyBytes_FromStringAndSize(p, end - p);
    if (bytes == NULL) return NULL;
    PyObject *v = PyObject_CallOneArg(t->loads, bytes);
    Py_DECREF(bytes);
    if (v == NULL) {
        /* not valid JSON (orjson's JSONDecodeError, a ValueError): the Python path says so; anything
         * else (MemoryError, KeyboardInterrupt) is the caller's, as it is on the Python path */
        if (!PyErr_ExceptionMatches(PyExc_ValueError)) return NULL;
        PyErr_Clear();
        return BAIL;
    }
    *pp = end;
    return v;
}

static inline int type_bit(PyObject *v) {
    PyTypeObject *tp = Py_TYPE(v);
    if (tp == &PyUnicode_Type) return B_STR;
    if (tp == &PyLong_Type) return B_INT;
    if (v == Py_None) return B_NONE;
    if (tp == &PyBool_Type) return B_BOOL;
    if (tp == &PyFloat_Type) return B_FLOAT;
    if (tp == &PyList_Type) return B_LIST;
    if (tp == &PyDict_Type) return B_DICT;
    return 0;
}

static Shape *lookup(Table *t, const char **kp, const Py_ssize_t *kn, int nk) {
    uint64_t h = 14695981039346656037ULL;
    Py_ssize_t siglen = 0;
    for (int i = 0; i < nk; i++) {
        h = fnv(h, kp[i], kn[i]);
        h = fnv(h, "", 1);
        siglen += kn[i] + 1;
    }
    for (uint64_t j = h;; j++) {
        Shape *s = t->slots[j % TABLE_SIZE];
        if (s == NULL) return NULL;
        if (s->hash != h || s->siglen != siglen || s->nkeys != nk) continue;
        const char *w = s->sig;
        int same = 1;
        for (int i = 0; i < nk && same; i++) {
            same = memcmp(w, kp[i], kn[i]) == 0 && w[kn[i]] == '\0';
            w += kn[i] + 1;
        }
        if (same) return s;
    }
}

/* The checks, sticky fields and record of a parsed line: a new (seq, record), BAIL or NULL. */
static PyObject *build(Table *t, Shape *s, PyObject **vals, const char **dp, const Py_ssize_t *dn, PyObject *sticky) {
    PyObject *seq = NULL;
    for (int i = 0; i < s->nkeys; i++) {
        Key *k = &s->keys[i];
        PyObject *v = vals[i];
        if (v == NULL) { /* an array or object, read only now that the shape says what it is */
            if (k->role != R_FIELD) return BAIL; /* (the envelope's or an unknown key's: the Python path) */
            PyObject *text = PyBytes_FromStringAndSize(dp[i], dn[i]);
            if (text == NULL) return NULL;
            v = PyObject_CallOneArg(k->tensor_list ? s->to_specs : t->loads, text);
            Py_DECREF(text);
            if (v == NULL) {
                if (k->tensor_list || !PyErr_ExceptionMatches(PyExc_ValueError)) return NULL;
                PyErr_Clear(); /* not valid JSON (a ValueError): the Python path says so */
                return BAIL;
            }
            vals[i] = v;
            if (k->tensor_list) {
                if (v == Py_None) return BAIL; /* not a valid tensor list */
                continue;
            }
        }
        switch (k->role) {
        case R_V: {
            if (!PyLong_CheckExact(v)) return BAIL;
            int overflow;
            long x = PyLong_AsLongAndOverflow(v, &overflow);
            if (overflow || x != s->version) return BAIL;
            break;
        }
        case R_SEQ: {
            if (!PyLong_CheckExact(v)) return BAIL;
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow < 0 || (!overflow && x < 0)) return BAIL;
            seq = v;
            break;
        }
        case R_KIND:
            if (v != s->kind && (!PyUnicode_CheckExact(v) || PyUnicode_Compare(v, s->kind) != 0)) return BAIL;
            break;
        case R_FIELD:
            if (k->tensor_list) {
                if (v != Py_None) return BAIL; /* neither null nor an array */
                break;
            }
            if (!(type_bit(v) & k->mask)) return BAIL;
            if (v == Py_None) break;
            if (k->oneof != NULL) {
                int in = PySet_Contains(k->oneof, v);
                if (in < 0) return NULL;
                if (!in) return BAIL;
            }
            if (k->deep != NULL) {
                PyObject *why = PyObject_CallOneArg(k->deep, v);
                if (why == NULL) return NULL;
                int fine = why == Py_None;
                Py_DECREF(why);
                if (!fine) return BAIL;
            }
            break;
        default:
            break;
        }
    }
    if (seq == NULL) return BAIL;
    PyObject *field[MAX_FIELDS]; /* borrowed */
    for (int f = 0; f < s->nfields; f++) field[f] = s->from_key[f] >= 0 ? vals[s->from_key[f]] : s->omitted[f];
    PyObject *keep = NULL; /* owns the sticky tuple read back, while its items are borrowed */
    if (s->nsticky && sticky != Py_None && PyUnicode_CheckExact(vals[s->dir_key]) &&
        PyUnicode_CompareWithASCIIString(vals[s->dir_key], "s2c") == 0) {
        PyObject *call = vals[s->call_key];
        int carried = 0;
        for (int j = 0; j < s->nsticky; j++) carried += !s->sticky_in_line[j];
        PyObject *before = NULL;
        if (carried) {
            before = PyDict_GetItemWithError(sticky, call);
            if (before == NULL && PyErr_Occurred()) return NULL;
            if (before != NULL) {
                if (!PyTuple_CheckExact(before) || PyTuple_GET_SIZE(before) != s->nsticky) return BAIL;
                Py_INCREF(before);
                keep = before;
                for (int j = 0; j < s->nsticky; j++)
                    if (!s->sticky_in_line[j]) field[s->sticky_field[j]] = PyTuple_GET_ITEM(before, j);
            }
        }
        if (carried < s->nsticky || before == NULL) { /* the common line (all carried, known call) keeps the state */
            PyObject *now = PyTuple_New(s->nsticky);
            if (now == NULL) {
                Py_XDECREF(keep);
                return NULL;
            }
            for (int j = 0; j < s->nsticky; j++) {
                PyObject *x = field[s->sticky_field[j]];
                Py_INCREF(x);
                PyTuple_SET_ITEM(now, j, x);
            }
            int bad = PyDict_SetItem(sticky, call, now);
            Py_DECREF(now);
            if (bad) {
                Py_XDECREF(keep);
                return NULL;
            }
        }
    } else if (s->forget && sticky != Py_None) {
        if (PyDict_DelItem(sticky, vals[s->call_key]) < 0) {
            if (!PyErr_ExceptionMatches(PyExc_KeyError)) return NULL;
            PyErr_Clear();
        }
    }
    PyObject *o = s->cls->tp_alloc(s->cls, 0);
    if (o == NULL) {
        Py_XDECREF(keep);
        return NULL;
    }
    for (int f = 0; f < s->nfields; f++) {
        Py_INCREF(field[f]);
        *(PyObject **)((char *)o + s->offset[f]) = field[f];
    }
    Py_XDECREF(keep);
    PyObject *out = PyTuple_New(2);
    if (out == NULL) {
        Py_DECREF(o);
        return NULL;
    }
    Py_INCREF(seq);
    PyTuple_SET_ITEM(out, 0, seq);
    PyTuple_SET_ITEM(out, 1, o);
    return out;
}

/* Table.decode(line, sticky): (seq, record), or None when the Python path must decode the line.
 * Hot loop (every line of every capture read). */
static PyObject *table_decode(Table *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode(line: bytes, sticky: dict | None)");
        return NULL;
    }
    PyObject *sticky = args[1];
    if (sticky != Py_None && !PyDict_CheckExact(sticky)) {
        PyErr_SetString(PyExc_TypeError, "sticky must be a dict or None");
        return NULL;
    }
    const char *p = PyBytes_AS_STRING(args[0]);
    const char *e = p + PyBytes_GET_SIZE(args[0]);
    /* The reader's common line only: a whole object on a line ended by a newline. */
    if (e - p < 3 || *p != '{' || e[-1] != '\n') Py_RETURN_NONE;
    const char *kp[MAX_KEYS], *dp[MAX_KEYS];
    Py_ssize_t kn[MAX_KEYS], dn[MAX_KEYS];
    PyObject *vals[MAX_KEYS];
    int nk = 0;
    Shape *s;
    PyObject *result = BAIL;
    p = ws(p + 1, e);
    if (p < e && *p == '}') goto closed;
    for (;;) {
        if (p >= e || *p != '"' || nk == MAX_KEYS) goto done;
        /* The key ends at the next quote: an escape, a control or non-ASCII byte in it cannot match a
         * registered shape (their keys have none), so the lookup below declines such a line. */
        p++; /* on its own: in the call, the order of the arguments is unspecified, and e - p counted before the increment let memchr look one byte past the line */
        const char *q = memchr(p, '"', e - p);
        if (q == NULL) goto done;
        kp[nk] = p;
        kn[nk] = q - p;
        p = ws(q + 1, e);
        if (p >= e || *p != ':') goto done;
        p = ws(p + 1, e);
        if (p >= e) goto done;
        if (*p == '[' || *p == '{') {
            /* Read once the shape is known (build): a tensor list goes to its memo as text. */
            const char *end = extent(p, e);
            if (end == NULL) goto done;
            dp[nk] = p;
            dn[nk] = end - p;
            vals[nk++] = NULL;
            p = end;
        } else {
            PyObject *v = value(t, &p, e);
            if (v == NULL) {
                result = NULL;
                goto done;
            }
            if (v == BAIL) goto done;
            vals[nk++] = v;
        }
        p = ws(p, e);
        if (p < e && *p == ',') {
            p = ws(p + 1, e);
            continue;
        }
        if (p < e && *p == '}') break;
        goto done;
    }
closed:
    if (ws(p + 1, e) != e) goto done;
    s = lookup(t, kp, kn, nk);
    if (s != NULL) result = build(t, s, vals, dp, dn, sticky);
done:
    for (int i = 0; i < nk; i++) Py_XDECREF(vals[i]);
    if (result == BAIL) Py_RETURN_NONE;
    return result;
}

static PyMethodDef table_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))table_decode, METH_FASTCALL,
     "decode(line, sticky) -> (seq, record), or None: decode the line the Python way"},
    {"add", (PyCFunction)table_add, METH_VARARGS, "add(keys, plan) -> bool: register a line shape"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "replay.capture._lines.Table",
    .tp_basicsize = sizeof(Table),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = table_new,
    .tp_dealloc = (destructor)table_dealloc,
    .tp_methods = table_methods,
    .tp_doc = "Registered line shapes and their compiled decoder (see replay/capture/lines.py)",
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_lines", "The capture decoder's compiled fast path (replay/capture/lines.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__lines(void) {
    if (PyType_Ready(&TableType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&TableType);
    if (PyModule_AddObject(m, "Table", (PyObject *)&TableType) < 0) {
        Py_DECREF(&TableType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "B_INT", B_INT) || PyModule_AddIntConstant(m, "B_STR", B_STR) ||
        PyModule_AddIntConstant(m, "B_BOOL", B_BOOL) || PyModule_AddIntConstant(m, "B_NONE", B_NONE) ||
        PyModule_AddIntConstant(m, "B_FLOAT", B_FLOAT) || PyModule_AddIntConstant(m, "B_LIST", B_LIST) ||
        PyModule_AddIntConstant(m, "B_DICT", B_DICT) || PyModule_AddIntConstant(m, "R_SKIP", R_SKIP) ||
        PyModule_AddIntConstant(m, "R_V", R_V) || PyModule_AddIntConstant(m, "R_SEQ", R_SEQ) ||
        PyModule_AddIntConstant(m, "R_KIND", R_KIND) || PyModule_AddIntConstant(m, "R_FIELD", R_FIELD)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
