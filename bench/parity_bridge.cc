// A TVM-FFI "candidate" that calls the task's library baseline: the candidate half of bench/baseline_parity.py.
//
// Each exported function has the task's candidate signature (inputs, then the harness-allocated outputs).
// It wraps the harness tensors as DLPack capsules (no copy), then, holding the GIL, calls the same
// function of ptxgym.evaluation.sandboxed.library_baselines that the baseline path loads, on the worker's
// current torch stream (the worker's harness stream). Returned outputs (the cuDNN wrappers return theirs)
// are copied into the harness outputs inside the call, as any candidate must write its outputs. Host
// code only: it is built with the host compiler, not nvcc, and reaches the library through the worker's
// Python interpreter (bench use only; never a shipped candidate). The few CPython C-API functions it
// uses are declared below (all exported functions of libpython, resolved in the worker's process), so
// the build needs no Python development headers.
#include <tvm/ffi/tvm_ffi.h>

#include <cstddef>
#include <string>
#include <vector>

extern "C" {
typedef struct _object PyObject;
typedef void (*PyCapsule_Destructor)(PyObject*);
int PyGILState_Ensure(void);  // returns the PyGILState_STATE enum
void PyGILState_Release(int);
PyObject* PyCapsule_New(void*, const char*, PyCapsule_Destructor);
int PyCapsule_IsValid(PyObject*, const char*);
void* PyCapsule_GetPointer(PyObject*, const char*);
PyObject* PyDict_New(void);
int PyDict_SetItemString(PyObject*, const char*, PyObject*);
PyObject* PyDict_GetItemString(PyObject*, const char*);
PyObject* PyEval_GetBuiltins(void);
PyObject* PyRun_StringFlags(const char*, int, PyObject*, PyObject*, void*);
PyObject* PyTuple_New(ptrdiff_t);
int PyTuple_SetItem(PyObject*, ptrdiff_t, PyObject*);
PyObject* PyUnicode_FromString(const char*);
const char* PyUnicode_AsUTF8(PyObject*);
PyObject* PyBool_FromLong(long);
PyObject* PyLong_FromLong(long);
PyObject* PyObject_CallObject(PyObject*, PyObject*);
PyObject* PyObject_Str(PyObject*);
void PyErr_Fetch(PyObject**, PyObject**, PyObject**);
void Py_IncRef(PyObject*);
void Py_DecRef(PyObject*);
}

constexpr int kPyFileInput = 257;  // Py_file_input

using tvm::ffi::TensorView;

namespace {

struct Owned {
  DLManagedTensor managed;
  std::vector<int64_t> shape, strides;
};

void drop(DLManagedTensor* m) { delete static_cast<Owned*>(m->manager_ctx); }

void drop_unused_capsule(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {  // never handed to torch: free it here
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    m->deleter(m);
  }
}

PyObject* capsule(const TensorView& t) {
  auto* o = new Owned();
  for (int i = 0; i < t.ndim(); ++i) {
    o->shape.push_back(t.size(i));
    o->strides.push_back(t.stride(i));
  }
  DLTensor& d = o->managed.dl_tensor;
  d.data = t.data_ptr();
  d.device = t.device();
  d.ndim = t.ndim();
  d.dtype = t.dtype();
  d.shape = o->shape.data();
  d.strides = o->strides.data();
  d.byte_offset = t.byte_offset();
  o->managed.manager_ctx = o;
  o->managed.deleter = drop;
  return PyCapsule_New(&o->managed, "dltensor", drop_unused_capsule);
}

const char* kHelper = R"PY(
def call(function, causal, n_out, *capsules):
    from torch.utils.dlpack import from_dlpack
    from ptxgym.evaluation.sandboxed import library_baselines
    args = [from_dlpack(c) for c in capsules]
    result = getattr(library_baselines, function)(*args, causal=causal)
    if result is not None:
        values = result if isinstance(result, (tuple, list)) else (result,)
        for dst, src in zip(args[len(args) - n_out:], values, strict=True):
            dst.copy_(src.reshape(dst.shape))
)PY";

PyObject* helper() {
  static PyObject* fn = nullptr;
  if (fn == nullptr) {
    PyObject* globals = PyDict_New();
    PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
    PyObject* done = PyRun_StringFlags(kHelper, kPyFileInput, globals, globals, nullptr);
    Py_DecRef(done);  // Py_DecRef and Py_IncRef accept NULL
    fn = done ? PyDict_GetItemString(globals, "call") : nullptr;
    Py_IncRef(fn);
    Py_DecRef(globals);
  }
  return fn;
}

std::string python_error() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject* text = value ? PyObject_Str(value) : nullptr;
  std::string out = text ? PyUnicode_AsUTF8(text) : "unknown Python error";
  Py_DecRef(text);
  Py_DecRef(type);
  Py_DecRef(value);
  Py_DecRef(tb);
  return out;
}

void call(const char* function, bool causal, int n_out, std::vector<TensorView> tensors) {
  int gil = PyGILState_Ensure();
  std::string error;
  PyObject* fn = helper();
  if (fn == nullptr) {
    error = "parity bridge helper: " + python_error();
  } else {
    PyObject* args = PyTuple_New(3 + static_cast<ptrdiff_t>(tensors.size()));
    PyTuple_SetItem(args, 0, PyUnicode_FromString(function));  // steals the reference
    PyTuple_SetItem(args, 1, PyBool_FromLong(causal));
    PyTuple_SetItem(args, 2, PyLong_FromLong(n_out));
    for (size_t i = 0; i < tensors.size(); ++i) PyTuple_SetItem(args, 3 + i, capsule(tensors[i]));
    PyObject* result = PyObject_CallObject(fn, args);
    if (result == nullptr) error = std::string(function) + ": " + python_error();
    Py_DecRef(result);
    Py_DecRef(args);
  }
  PyGILState_Release(gil);
  if (!error.empty()) TVM_FFI_THROW(RuntimeError) << error;
}

}  // namespace

void gemm(TensorView A, TensorView B, TensorView C) { call("gemm_cublas", false, 1, {A, B, C}); }

void mha_fwd(TensorView Q, TensorView K, TensorView V, TensorView O, TensorView LSE) {
  call("mha_fwd_cudnn", false, 2, {Q, K, V, O, LSE});
}

void mha_fwd_causal(TensorView Q, TensorView K, TensorView V, TensorView O, TensorView LSE) {
  call("mha_fwd_cudnn", true, 2, {Q, K, V, O, LSE});
}

void mha_bwd(TensorView Q, TensorView K, TensorView V, TensorView O, TensorView dO, TensorView LSE,
             TensorView dQ, TensorView dK, TensorView dV) {
  call("mha_bwd_cudnn", false, 3, {Q, K, V, O, dO, LSE, dQ, dK, dV});
}

void mha_bwd_causal(TensorView Q, TensorView K, TensorView V, TensorView O, TensorView dO, TensorView LSE,
                    TensorView dQ, TensorView dK, TensorView dV) {
  call("mha_bwd_cudnn", true, 3, {Q, K, V, O, dO, LSE, dQ, dK, dV});
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm, gemm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mha_fwd, mha_fwd);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mha_fwd_causal, mha_fwd_causal);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mha_bwd, mha_bwd);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mha_bwd_causal, mha_bwd_causal);
