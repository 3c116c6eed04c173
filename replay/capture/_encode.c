/* The sparse dict of one record, compiled: Plan(...).build(record, seq, skip) -> the dict orjson writes.
 *
 * Why: the capture writer turns every record into a sparse dict (fields equal to what a reader fills
 * in are left out) and orjson writes it. As generated Python (replay/capture/schema.py `_compile`)
 * the dict was ~10 % of the proxy's work per streamed response (issue 18): one attribute read and
 * one test per field of 24. This reads the slots by offset and makes the same tests.
 *
 * The same dict, keys in the same order, as the Python (tests/replay/capture/test_encode.py): the
 * envelope `v`, `seq`, `kind`, then every field in order that is required (`always`), or not the
 * very object nor equal to the value a reader fills in for it; tensor lists through the given
 * Python function per tensor. Fields whose bit is set in `skip` are left out (the sparse encoder's
 * sticky fields, when they repeat) without being evaluated, as the Python version leaves them. An
 * unset slot raises AttributeError, as reading it would. Python code this
 * runs (a value's __ne__, the tensor function) may change the record or the list: values are held and
 * lists read through their iterator, never by a size read before.
 * Pure: no I/O, no state but the plan.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "../_slots.h"

#define MAX_FIELDS 64

typedef struct {
    PyObject_HEAD
    PyTypeObject *cls;
    PyObject *version, *kind, *tensor;
    Py_ssize_t nfields;
    PyObject *names[MAX_FIELDS];
    PyObject *omitted[MAX_FIELDS]; /* NULL: always written */
    Py_ssize_t offset[MAX_FIELDS];
    int tensors[MAX_FIELDS];
} Plan;

static PyObject *s_v, *s_seq, *s_kind;

static void plan_dealloc(Plan *p) {
    Py_XDECREF(p->cls);
    Py_XDECREF(p->version);
    Py_XDECREF(p->kind);
    Py_XDECREF(p->tensor);
    for (Py_ssize_t k = 0; k < p->nfields; k++) {
        Py_XDECREF(p->names[k]);
        Py_XDECREF(p->omitted[k]);
    }
    Py_TYPE(p)->tp_free((PyObject *)p);
}

/* Plan(cls, version, names, omitted, always, tensor_fields, tensor): `omitted[k]` is what a line
 * leaving field k out reads as, or `always` when it is never left out; `tensor_fields` the names
 * whose value is a list of tensors, each written as tensor(t). */
static int plan_init(Plan *p, PyObject *args, PyObject *kwds) {
    PyTypeObject *cls;
    PyObject *version, *names, *omitted, *always, *tensor_fields, *tensor;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "Plan takes positional arguments only");
        return -1;
    }
    if (p->nfields || p->kind != NULL) {
        PyErr_SetString(PyExc_TypeError, "Plan: already initialised");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O!O!O!O!OO!O", &PyType_Type, &cls, &PyLong_Type, &version, &PyTuple_Type, &names,
                          &PyTuple_Type, &omitted, &always, &PyFrozenSet_Type, &tensor_fields, &tensor))
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (n > MAX_FIELDS || PyTuple_GET_SIZE(omitted) != n) {
        PyErr_SetString(PyExc_ValueError, "Plan: names and omitted do not match (or too many fields)");
        return -1;
    }
    PyObject *kind = PyObject_GetAttrString((PyObject *)cls, "kind");
    if (kind == NULL)
        return -1;
    p->kind = kind;
    p->cls = (PyTypeObject *)Py_NewRef(cls);
    p->version = Py_NewRef(version);
    p->tensor = Py_NewRef(tensor);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *name = PyTuple_GET_ITEM(names, k);
        Py_ssize_t offset = field_slot(cls, name, "Plan");
        if (offset < 0)
            return -1;
        int t = PySet_Contains(tensor_fields, name);
        if (t < 0)
            return -1;
        PyObject *o = PyTuple_GET_ITEM(omitted, k);
        p->names[k] = Py_NewRef(name);
        PyUnicode_InternInPlace(&p->names[k]);
        p->omitted[k] = o == always ? NULL : Py_NewRef(o);
        p->offset[k] = offset;
        p->tensors[k] = t;
        p->nfields = k + 1;
    }
    return 0;
}

/* [tensor(t) for t in v], as the Python version builds it: item by item through v's iterator, so a
 * tensor() that shrinks or grows the list is seen as the Python sees it (the size read once, with the
 * items then read by index, went past the end of a list the callback shrank), and the same TypeError
 * for a value that is not iterable. A new list, or NULL with an exception set. */
static PyObject *tensor_list(Plan *p, PyObject *v) {
    PyObject *it = PyObject_GetIter(v);
    if (it == NULL)
        return NULL;
    PyObject *list = PyList_New(0), *t;
    if (list == NULL) {
        Py_DECREF(it);
        return NULL;
    }
    while ((t = PyIter_Next(it)) != NULL) {
        PyObject *one = PyObject_CallOneArg(p->tensor, t);
        Py_DECREF(t);
        if (one == NULL || PyList_Append(list, one) < 0) {
            Py_XDECREF(one);
            goto fail;
        }
        Py_DECREF(one);
    }
    if (PyErr_Occurred())
        goto fail;
    Py_DECREF(it);
    return list;
fail:
    Py_DECREF(it);
    Py_DECREF(list);
    return NULL;
}

/* Field k of `rec` in a sparse line: 1 written (its value in *v), 2 a tensor list to write (the list of
 * tensors in *v), 0 left out (skipped, or what a reader fills in), -1 error (an unset slot: AttributeError,
 * as reading it would; or what the comparison or tensor() raised). *v is a new reference when 1 or 2: the
 * slot's value is held while the comparison runs, since an __ne__ may rebind the slot and free it.
 * A field whose bit is set in `skip` is read (an unset slot raises) and left out unevaluated, as the
 * Python version leaves it: the twins agree with any `skip`. The one rule `build` and `line` share. */
static int field_of(Plan *p, PyObject *rec, Py_ssize_t k, unsigned long long skip, PyObject **v) {
    PyObject *x = *(PyObject **)((char *)rec + p->offset[k]);
    if (x == NULL) {
        PyErr_Format(PyExc_AttributeError, "%U", p->names[k]);
        return -1;
    }
    if (k < 64 && (skip >> k) & 1)
        return 0; /* left out unevaluated, as the Python version leaves it (the sticky fields of a repeat) */
    PyObject *o = p->omitted[k];
    if (o == NULL)
        return *v = Py_NewRef(x), 1;
    if (p->tensors[k]) {
        if (x == Py_None)
            return 0;
        return *v = Py_NewRef(x), 2;
    }
    if (x == o)
        return 0;
    Py_INCREF(x);
    int ne = PyObject_RichCompareBool(x, o, Py_NE);
    if (ne <= 0) {
        Py_DECREF(x);
        return ne < 0 ? -1 : 0;
    }
    *v = x;
    return 1;
}

/* build(record, seq, skip): the record's sparse dict. Hot path: once per record the writer writes. */
static PyObject *plan_build(Plan *p, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "build(record, seq, skip)");
        return NULL;
    }
    PyObject *rec = args[0];
    unsigned long long skip = PyLong_AsUnsignedLongLong(args[2]);
    if (skip == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (p->cls == NULL || Py_TYPE(rec) != p->cls) {
        /* slots are read by offset: only an instance of exactly the plan's class will do */
        PyErr_SetString(PyExc_TypeError, "build: not a record of the plan's class");
        return NULL;
    }
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    if (PyDict_SetItem(d, s_v, p->version) < 0 || PyDict_SetItem(d, s_seq, args[1]) < 0 ||
        PyDict_SetItem(d, s_kind, p->kind) < 0)
        goto fail;
    for (Py_ssize_t k = 0; k < p->nfields; k++) {
        PyObject *v;
        int w = field_of(p, rec, k, skip, &v);
        if (w < 0)
            goto fail;
        if (w == 0)
            continue;
        if (w == 2) {
            PyObject *list = tensor_list(p, v);
            Py_SETREF(v, list);
            if (v == NULL)
                goto fail;
        }
        int r = PyDict_SetItem(d, p->names[k], v);
        Py_DECREF(v);
        if (r < 0)
            goto fail;
    }
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

/* -- line(record, seq, skip, payload_at): the JSONL line itself, for the common records ---------------
 *
 * orjson writes the dict `build` makes; this writes the same bytes without the dict, for records whose
 * values are all of the kinds it knows: None, bool, int (64-bit, as orjson), str (escaped as orjson
 * escapes: \" \\ \b \t \n \f \r, other control characters as \u00xx, everything else as UTF-8),
 * float when its shortest repr has no exponent (orjson's shortest form is then the same digits: a
 * duration, a timeout), lists of str and int, and lists of those lists (header pairs). Anything else
 * (a float with an exponent or not finite, a tensor list, a subclass, a lone surrogate, a bigger int)
 * answers None, and the caller builds the dict and hands it to orjson, which also raises what it
 * raises. tests/replay/capture/test_encode.py holds the bytes equal to orjson's. */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
    char small[1024];
} Out;

static int out_grow(Out *o, Py_ssize_t need) {
    Py_ssize_t cap = (o->len + need) * 2;
    char *p = PyMem_Malloc((size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(p, o->p, (size_t)o->len);
    if (o->p != o->small)
        PyMem_Free(o->p);
    o->p = p;
    o->cap = cap;
    return 0;
}

static inline int put(Out *o, const char *src, Py_ssize_t n) {
    if (o->len + n > o->cap && out_grow(o, n) < 0)
        return -1;
    memcpy(o->p + o->len, src, (size_t)n);
    o->len += n;
    return 0;
}

/* 1 written, 0 not a kind this writes (the caller falls back), -1 error */
static int put_str(Out *o, PyObject *v) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(v, &n);
    if (s == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear(); /* a lone surrogate: orjson's to refuse */
        return 0;
    }
    if (o->len + 2 + 6 * n > o->cap && out_grow(o, 2 + 6 * n) < 0)
        return -1;
    char *d = o->p + o->len;
    *d++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *d++ = (char)c;
            continue;
        }
        *d++ = '\\';
        switch (c) {
        case '"': *d++ = '"'; break;
        case '\\': *d++ = '\\'; break;
        case '\b': *d++ = 'b'; break;
        case '\t': *d++ = 't'; break;
        case '\n': *d++ = 'n'; break;
        case '\f': *d++ = 'f'; break;
        case '\r': *d++ = 'r'; break;
        default:
            *d++ = 'u';
            *d++ = '0';
            *d++ = '0';
            *d++ = "0123456789abcdef"[c >> 4];
            *d++ = "0123456789abcdef"[c & 15];
        }
    }
    *d++ = '"';
    o->len = d - o->p;
    return 1;
}

/* decimal digits of u, written backwards from end; returns the first */
static char *digits(char *end, unsigned long long u) {
    do {
        *--end = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    return end;
}

static int put_int(Out *o, PyObject *v) {
    char num[24];
    char *end = num + sizeof(num), *start;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear(); /* beyond 64 bits: orjson's to refuse */
            return 0;
        }
        start = digits(end, u);
    } else if (overflow < 0) {
        return 0;
    } else if (x < 0) {
        start = digits(end, 0ULL - (unsigned long long)x);
        *--start = '-';
    } else {
        start = digits(end, (unsigned long long)x);
    }
    return put(o, start, end - start) < 0 ? -1 : 1;
}

/* repr's digits when they are orjson's: no exponent, finite (else 0: the caller falls back) */
static int put_float(Out *o, PyObject *v) {
    char *r = PyOS_double_to_string(PyFloat_AS_DOUBLE(v), 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (r == NULL)
        return -1;
    int ok = strpbrk(r, "eni") == NULL; /* 1e+16, inf, nan */
    int res = ok ? (put(o, r, (Py_ssize_t)strlen(r)) < 0 ? -1 : 1) : 0;
    PyMem_Free(r);
    return res;
}

static int put_value(Out *o, PyObject *v, int depth) {
    if (v == Py_None)
        return put(o, "null", 4) < 0 ? -1 : 1;
    if (v == Py_True)
        return put(o, "true", 4) < 0 ? -1 : 1;
    if (v == Py_False)
        return put(o, "false", 5) < 0 ? -1 : 1;
    if (PyLong_CheckExact(v))
        return put_int(o, v);
    if (PyUnicode_CheckExact(v))
        return put_str(o, v);
    if (PyFloat_CheckExact(v)) /* never inside a list: the item check below lets none in */
        return put_float(o, v);
    if (PyList_CheckExact(v) && depth < 2) {
        /* depth 0: a field's list, of str, int or (header pairs) lists; depth 1: a list in it, of str and int */
        if (put(o, "[", 1) < 0)
            return -1;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(v); j++) {
            PyObject *item = PyList_GET_ITEM(v, j);
            if (!PyLong_CheckExact(item) && !PyUnicode_CheckExact(item) && !(depth == 0 && PyList_CheckExact(item)))
                return 0;
            if (j && put(o, ",", 1) < 0)
                return -1;
            int r = put_value(o, item, depth + 1);
            if (r <= 0)
                return r;
        }
        return put(o, "]", 1) < 0 ? -1 : 1;
    }
    return 0;
}

static int put_key(Out *o, PyObject *name) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(name, &n); /* our own field names: plain ASCII identifiers */
    if (s == NULL || put(o, ",\"", 2) < 0 || put(o, s, n) < 0 || put(o, "\":", 2) < 0)
        return -1;
    return 0;
}

static PyObject *plan_line(Plan *p, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "line(record, seq, skip, payload_at)");
        return NULL;
    }
    PyObject *rec = args[0], *seq = args[1], *payload_at = args[3];
    if (p->cls == NULL || Py_TYPE(rec) != p->cls) {
        PyErr_SetString(PyExc_TypeError, "line: not a record of the plan's class");
        return NULL;
    }
    unsigned long long skip = PyLong_AsUnsignedLongLong(args[2]);
    if (skip == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    Out o;
    o.p = o.small;
    o.len = 0;
    o.cap = sizeof(o.small);
    PyObject *res = NULL;
    int r, placed = payload_at == Py_None;
    if (put(&o, "{\"v\":", 5) < 0 || (r = put_value(&o, p->version, 0)) < 0)
        goto done;
    if (!r)
        goto fallback;
    if (put(&o, ",\"seq\":", 7) < 0 || (r = put_value(&o, seq, 0)) < 0)
        goto done;
    if (!r)
        goto fallback;
    if (put(&o, ",\"kind\":", 8) < 0 || (r = put_value(&o, p->kind, 0)) < 0)
        goto done;
    if (!r)
        goto fallback;
    for (Py_ssize_t k = 0; k < p->nfields; k++) {
        PyObject *v;
        int w = field_of(p, rec, k, skip, &v);
        if (w < 0)
            goto done;
        if (w == 0)
            continue;
        if (w == 2) {
            Py_DECREF(v);
            goto fallback; /* tensor lists: the dict and orjson */
        }
        if (!placed && PyUnicode_CompareWithASCIIString(p->names[k], "payload_at") == 0) {
            Py_SETREF(v, Py_NewRef(payload_at)); /* the writer's place in the side file, where the field stands */
            placed = 1;
        }
        r = put_key(&o, p->names[k]) < 0 ? -1 : put_value(&o, v, 0);
        Py_DECREF(v);
        if (r < 0)
            goto done;
        if (!r)
            goto fallback;
    }
    if (!placed) { /* not in the record's own fields: after them, as the dict gets it */
        if (put(&o, ",\"payload_at\":", 14) < 0 || (r = put_value(&o, payload_at, 0)) < 0)
            goto done;
        if (!r)
            goto fallback;
    }
    if (put(&o, "}\n", 2) < 0)
        goto done;
    res = PyBytes_FromStringAndSize(o.p, o.len);
    goto done;
fallback:
    res = Py_NewRef(Py_None);
done:
    if (o.p != o.small)
        PyMem_Free(o.p);
    return res;
}

static PyMethodDef plan_methods[] = {
    {"line", (PyCFunction)(void (*)(void))plan_line, METH_FASTCALL,
     "line(record, seq, skip, payload_at) -> bytes | None: the JSONL line orjson would write, or None (schema.py)"},
    {"build", (PyCFunction)(void (*)(void))plan_build, METH_FASTCALL,
     "build(record, seq, skip) -> dict: the record's sparse dict (replay/capture/schema.py)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "replay.capture._encode.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Builds the sparse dict of one record class's instances (replay/capture/schema.py).",
    .tp_methods = plan_methods,
    .tp_init = (initproc)plan_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_encode", "The sparse dict of one record, compiled (replay/capture/schema.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__encode(void) {
    s_v = PyUnicode_InternFromString("v");
    s_seq = PyUnicode_InternFromString("seq");
    s_kind = PyUnicode_InternFromString("kind");
    if (s_v == NULL || s_seq == NULL || s_kind == NULL || PyType_Ready(&PlanType) < 0)
        return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL)
        return NULL;
    if (PyModule_AddObjectRef(mod, "Plan", (PyObject *)&PlanType) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
