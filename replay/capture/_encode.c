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
 * sticky fields, when they repeat). An unset slot raises AttributeError, as reading it would.
 * Pure: no I/O, no state but the plan.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

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
        PyObject *descr = PyDict_GetItemWithError(cls->tp_dict, name);
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type) || ((PyDescrObject *)descr)->d_type != cls) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "Plan: %R is not a slot of %s", name, cls->tp_name);
            return -1;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX || member->offset <= 0 ||
            member->offset + (Py_ssize_t)sizeof(PyObject *) > cls->tp_basicsize) {
            PyErr_Format(PyExc_TypeError, "Plan: %R is not a plain object slot", name);
            return -1;
        }
        int t = PySet_Contains(tensor_fields, name);
        if (t < 0)
            return -1;
        PyObject *o = PyTuple_GET_ITEM(omitted, k);
        p->names[k] = Py_NewRef(name);
        PyUnicode_InternInPlace(&p->names[k]);
        p->omitted[k] = o == always ? NULL : Py_NewRef(o);
        p->offset[k] = member->offset;
        p->tensors[k] = t;
        p->nfields = k + 1;
    }
    return 0;
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
        PyObject *v = *(PyObject **)((char *)rec + p->offset[k]);
        if (v == NULL) {
            PyErr_Format(PyExc_AttributeError, "%U", p->names[k]);
            goto fail;
        }
        if (k < 64 && (skip >> k) & 1)
            continue;
        PyObject *o = p->omitted[k];
        if (o == NULL) {
            if (PyDict_SetItem(d, p->names[k], v) < 0)
                goto fail;
            continue;
        }
        if (p->tensors[k]) {
            if (v == Py_None)
                continue;
            /* [tensor(t) for t in v] */
            PyObject *seq = PySequence_Fast(v, "a tensor list must be a sequence");
            if (seq == NULL)
                goto fail;
            Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
            PyObject *list = PyList_New(m);
            if (list == NULL) {
                Py_DECREF(seq);
                goto fail;
            }
            for (Py_ssize_t j = 0; j < m; j++) {
                PyObject *one = PyObject_CallOneArg(p->tensor, PySequence_Fast_GET_ITEM(seq, j));
                if (one == NULL) {
                    Py_DECREF(list);
                    Py_DECREF(seq);
                    goto fail;
                }
                PyList_SET_ITEM(list, j, one);
            }
            Py_DECREF(seq);
            int r = PyDict_SetItem(d, p->names[k], list);
            Py_DECREF(list);
            if (r < 0)
                goto fail;
            continue;
        }
        if (v == o)
            continue;
        int ne = PyObject_RichCompareBool(v, o, Py_NE);
        if (ne < 0)
            goto fail;
        if (ne && PyDict_SetItem(d, p->names[k], v) < 0)
            goto fail;
    }
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static PyMethodDef plan_methods[] = {
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
