// The call arguments of every input set, built once at attach from Attach.sets (protocol.py): DLTensor
// views of the attached blob (checked to lie inside one mapped run) and scalars, as TVMFFIAny values,
// exactly as the Python worker's argument_views builds torch views (contiguous, dtype by torch name).
#pragma once

#include <tvm/ffi/c_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "json.h"

namespace ptxrunner {

// torch dtype names (without "torch.") as DLPack types.
inline DLDataType parse_dtype(const std::string& name) {
  struct Entry {
    const char* name;
    uint8_t code, bits;
  };
  static const Entry kTable[] = {
      {"float32", kDLFloat, 32},  {"float16", kDLFloat, 16},  {"float64", kDLFloat, 64},
      {"bfloat16", kDLBfloat, 16}, {"int8", kDLInt, 8},        {"int16", kDLInt, 16},
      {"int32", kDLInt, 32},      {"int64", kDLInt, 64},      {"uint8", kDLUInt, 8},
      {"uint16", kDLUInt, 16},    {"uint32", kDLUInt, 32},    {"uint64", kDLUInt, 64},
      {"bool", kDLBool, 8},       {"float8_e4m3fn", kDLFloat8_e4m3fn, 8},
      {"float8_e5m2", kDLFloat8_e5m2, 8},
  };
  for (const Entry& e : kTable)
    if (name == e.name) return DLDataType{e.code, e.bits, 1};
  throw std::runtime_error("unknown dtype '" + name + "'");
}

using Runs = std::vector<std::pair<size_t, size_t>>;  // mapped (offset, size) runs of the blob

// One input set's arguments; the pointers inside stay valid as long as the set lives.
struct ArgSet {
  std::vector<DLTensor> tensors;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<TVMFFIAny> args;
};

// A view of the blob checked to lie inside one mapped run.
inline void* view(char* base, const Runs& runs, int64_t offset, size_t nbytes) {
  for (auto& r : runs)
    if (offset >= 0 && size_t(offset) >= r.first && size_t(offset) - r.first <= r.second &&
        nbytes <= r.second - (size_t(offset) - r.first))
      return base + offset;
  throw std::runtime_error("tensor at offset " + std::to_string(offset) + " (" + std::to_string(nbytes) +
                           " bytes) is not inside a mapped run of the blob");
}

inline void scalar_arg(const Json& v, TVMFFIAny* out) {
  if (v.kind == Json::kBool) {
    out->type_index = kTVMFFIBool;
    out->v_int64 = v.b;
  } else if (v.kind == Json::kInt) {
    out->type_index = kTVMFFIInt;
    out->v_int64 = v.i;
  } else if (v.kind == Json::kFloat) {
    out->type_index = kTVMFFIFloat;
    out->v_float64 = v.f;
  } else {
    throw std::runtime_error("a scalar must be a bool, an integer or a float");
  }
}

// Every set of Attach.sets as arguments over the blob at `base` on `device`.
inline std::vector<std::unique_ptr<ArgSet>> build_sets(const Json& sets, char* base, const Runs& runs,
                                                      DLDevice device) {
  std::vector<std::unique_ptr<ArgSet>> out;
  for (const Json& entry : sets.as_array("sets")) {
    const auto& list = entry.as_array("a set");
    auto set = std::make_unique<ArgSet>();
    set->tensors.resize(list.size());
    set->shapes.resize(list.size());
    set->args.resize(list.size());
    for (size_t k = 0; k < list.size(); ++k) {
      const Json& a = list[k];
      TVMFFIAny* arg = &set->args[k];
      std::memset(arg, 0, sizeof *arg);
      const std::string& role = a.at("role").as_str("role");
      if (role == "scalar") {
        scalar_arg(a.at("value"), arg);
        continue;
      }
      if (role != "in" && role != "out") throw std::runtime_error("unknown role '" + role + "'");
      DLDataType dtype = parse_dtype(a.at("dtype").as_str("dtype"));
      size_t nbytes = dtype.bits / 8;
      for (const Json& d : a.at("shape").as_array("shape")) {
        int64_t n = d.as_int("a dimension");
        if (n < 0 || (n > 0 && nbytes > (size_t(1) << 48) / size_t(n)))
          throw std::runtime_error("a dimension is negative or the tensor is too large");
        nbytes *= size_t(n);
        set->shapes[k].push_back(n);
      }
      DLTensor* t = &set->tensors[k];
      std::memset(t, 0, sizeof *t);
      t->data = view(base, runs, a.at("offset").as_int("offset"), nbytes);
      t->device = device;
      t->ndim = int32_t(set->shapes[k].size());
      t->dtype = dtype;
      t->shape = set->shapes[k].data();
      t->strides = nullptr;  // contiguous
      arg->type_index = kTVMFFIDLTensorPtr;
      arg->v_ptr = t;
    }
    out.push_back(std::move(set));
  }
  return out;
}

}  // namespace ptxrunner
