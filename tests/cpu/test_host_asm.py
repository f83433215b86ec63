"""Host-side inline assembly (``ptxgym.cpu.host_asm``): the source rule and the build's backstop.

Device asm is the product and must pass in every usual spelling (device and global functions, templates,
members, lambdas and blocks inside them, qualifier macros, asm macros used in kernels, ``__CUDA_ARCH__``
guards); host asm must be refused in every spelling, including those that reach the host assembler's
``.incbin``/``.include`` (the H200 finds). The backstop is shown on real nvcc builds: it catches host asm
that only a header's macro produces, which the source rule cannot see.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ptxgym.cpu.build import build_solution
from ptxgym.cpu.host_asm import find_host_asm, host_asm_in_assembly, host_asm_in_translation
from ptxgym.cpu.screen import _lex, check_source
from ptxgym.knowledge_packs.variants import PACK_ROOT
from ptxgym.records.arch import HOPPER
from ptxgym.records.feedback import Status
from ptxgym.records.schema import BuildSpec, Solution, SourceFile, SupportedLanguage

ROOT = Path(__file__).resolve().parents[2]

DEVICE = {
    "device function": '__device__ __forceinline__ unsigned lane() { unsigned r; asm volatile("mov.u32 %0, '
    '%%laneid;" : "=r"(r)); return r; }',
    "template": "template <int N> __device__ void wait() { "
    'asm volatile("cp.async.wait_group %0;" :: "n"(N)); }',
    "kernel with block and lambda": '__global__ void k(int x) { if (x) { asm("trap;"); } '
    'auto f = [&]() { asm volatile("nanosleep.u32 1;"); }; f(); }',
    "static device": 'static __device__ inline void f() { __asm__ __volatile__("membar.gl;"); }',
    "member": 'struct S { int a; __device__ void f() { asm("trap;"); } };',
    "member of a class template": "template <class T> struct W { "
    '__device__ static void f() { asm("trap;"); } };',
    "lambda in a member": 'struct X { __device__ void g() { auto l = [] { asm("trap;"); }; l(); } };',
    "aligned struct": 'struct alignas(16) Smem { float x[4]; __device__ void f() { asm("trap;"); } };',
    "qualifier macro": '#define DEVINL __device__ __forceinline__\nDEVINL void f() { asm("trap;"); }',
    "asm macro in a kernel": '#define FENCE() asm volatile("fence.proxy.async;" ::: "memory")\n'
    "__global__ void k() { FENCE(); }",
    "ifdef __CUDA_ARCH__": '__host__ __device__ int f() {\n#ifdef __CUDA_ARCH__\n  asm("trap;");\n#endif\n'
    "  return 1; }",
    "if defined && >=": "__host__ __device__ int f() {\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n"
    '  asm("trap;");\n#else\n  return 0;\n#endif\n  return 1; }',
    "ifndef ... else": "__host__ __device__ int f() {\n#ifndef __CUDA_ARCH__\n  return 0;\n#else\n"
    '  asm("trap;");\n#endif\n  return 1; }',
    "namespaces": 'namespace a { namespace { __device__ void f() { asm("trap;"); } } }',
    "extern C kernel": 'extern "C" __global__ void k() { asm("trap;"); }',
    "launch bounds": '__global__ void __launch_bounds__(128, 1) k() { asm("trap;"); }',
    "pasting macro with harmless pieces": "#define JOIN(a,b) a##b\nvoid JOIN(ru,n2)() {}",
    "asm in names, comments and strings": 'int asm_count = 0; // asm("x")\nvoid f() { const char* s = '
    '"asm(nop)"; asm_count++; }',
}
HOST = {
    "file scope (the .incbin find)": (
        '#define S(x) #x\nasm(S(.incbin) " \\"/etc/passwd\\"");',
        "file or namespace",
    ),
    "host function": ('void run() { asm("nop"); }', "a host function"),
    "__host__ __device__": ('__host__ __device__ void f() { asm("nop"); }', "__host__ __device__"),
    "__device__ __host__": ('__device__ __host__ void f() { asm("nop"); }', "__host__ __device__"),
    "asm macro in host code": ('#define NOP asm("nop")\nvoid run() { NOP; }', "macro NOP"),
    "macro using an asm macro": (
        '#define NOP asm("nop")\n#define TWO NOP; NOP\nvoid run() { TWO; }',
        "macro TWO",
    ),
    "pasted asm": ('#define CAT(a,b) a##b\nvoid run() { CAT(a,sm)("nop"); }', "macro CAT"),
    "pasted through another macro": (
        '#define CAT(a,b) a##b\n#define X(y) CAT(y, m)\nvoid run() { X(as)("nop"); }',
        "X",
    ),
    "pasted with its own piece": ('#define A(x) x##sm\nvoid run() { A(a)("nop"); }', "macro A"),
    "__device__ redefined": (
        '#undef __device__\n#define __device__\n__device__ void f() { asm("nop"); }',
        "#undef",
    ),
    "asm redefined": ("#define asm __asm__\n__global__ void k() {}", "#define asm"),
    "#line": ('#line 1 "/usr/include/stdio.h"\nvoid f() { }', "#line"),
    "GNU line marker": ('# 1 "/usr/include/stdio.h"\nvoid f() { }', "# 1"),
    "lambda at file scope": ('auto f = [] { asm("nop"); };', "lambda outside device code"),
    "class body": ('struct S { int x asm("foo"); };', "a class body"),
    "arch guard that holds on the host": (
        '__host__ __device__ void f() {\n#if __CUDA_ARCH__ >= 0\n asm("nop");\n#endif\n}',
        "__host__ __device__",
    ),
    "arch guard with ||": (
        '__host__ __device__ void f() {\n#if defined(__CUDA_ARCH__) || 1\n asm("nop");\n#endif\n}',
        "__host__ __device__",
    ),
    "else of an arch guard": (
        '__host__ __device__ void f() {\n#ifdef __CUDA_ARCH__\n#else\n asm("nop");\n#endif\n}',
        "__host__ __device__",
    ),
    "asm label": ('extern "C" void* my_open(const char*, int) __asm__("dlopen");', "file or namespace"),
}


@pytest.mark.parametrize("name", sorted(DEVICE))
def test_device_asm_passes(name: str) -> None:
    verdict = check_source(DEVICE[name])
    assert verdict.ok, verdict.message


@pytest.mark.parametrize("name", sorted(HOST))
def test_host_asm_is_rejected_with_the_reason(name: str) -> None:
    code, why = HOST[name]
    verdict = check_source(code)
    assert not verdict.ok and verdict.rule == "host-asm", verdict.message
    assert why in verdict.message and "allowed only in __global__ or __device__" in verdict.message
    assert verdict.file == "kernel.cu" and verdict.line is not None


def test_plain_cpp_files_and_what_they_include_are_host_code() -> None:
    device = '__device__ void f() { asm("trap;"); }\n'
    assert check_source("int k;", {"helper.cuh": device}).ok
    verdict = check_source("int k;", {"helper.cuh": device, "host.cpp": '#include "helper.cuh"\n'})
    assert verdict.rule == "host-asm" and verdict.file == "helper.cuh" and "host C++" in verdict.message


def test_the_pack_headers_and_every_shipped_kernel_pass() -> None:
    files = [*PACK_ROOT.rglob("*.cuh"), *PACK_ROOT.rglob("*.cu"), *(ROOT / "tests" / "kernels").glob("*.cu*")]
    files += (ROOT / "ptxgym" / "audit" / "kernels").glob("*.cu*")
    assert len(files) > 40
    for path in files:
        assert find_host_asm({path.name: _lex(path.read_text()).bare}) is None, path


TRANSLATION = """# 1 "kernel.cu"
# 12 "/usr/include/string.h" 3
extern void *memchr(void *, int, unsigned long) __asm__("memchr");
# 5 "kernel.cu"
__attribute__((unused)) static inline void lane()
{int volatile ___ = 1;
::exit(___);}
#if 0
# 5
{ __asm__ volatile("mov.u32 %0, %%laneid;" : "=r"(r)); }
#endif
# 9 "kernel.cu"
void run() { const char* s = "asm"; }
# 11
void run2() { __asm__ volatile("nop"); }
"""


def test_backstop_reads_the_host_translation() -> None:
    found = host_asm_in_translation(TRANSLATION)
    assert found == ("kernel.cu", 11, 'void run2() { __asm__ volatile("nop"); }')
    clean = TRANSLATION.replace('__asm__ volatile("nop")', "")
    assert host_asm_in_translation(clean) is None  # headers' asm labels, device bodies


@pytest.mark.parametrize("name", ["zzz_not_mine.h", "/usr/include/zz_not_a_header.h", "x.cudafe1.stub.c"])
def test_backstop_counts_every_line_whichever_file_the_markers_name(name: str) -> None:
    """A `#line` the screen misread once gave a candidate's asm to a header path: markers decide nothing."""
    spoofed = TRANSLATION.replace('# 9 "kernel.cu"', f'# 9 "{name}"')
    assert host_asm_in_translation(spoofed) == (name, 11, 'void run2() { __asm__ volatile("nop"); }')


def test_backstop_counts_assembler_strings_and_ident() -> None:
    clean = TRANSLATION.replace('__asm__ volatile("nop")', "")
    section = clean + '__attribute((used, section(".rodata.x\\n.text\\n"))) const int marker = 1;\n'
    found = host_asm_in_translation(section)
    assert found is not None and found[0] == "kernel.cu" and "section(" in found[2]
    header = '# 1 "/usr/include/x.h" 3\n__attribute__((section(".x"))) int y;\n'
    assert host_asm_in_translation(header) is not None
    ident = clean + '#ident "a\\n.incbin \\"/etc/passwd\\""\n'
    assert host_asm_in_translation(ident) is not None


def test_backstop_allows_a_top_level_symbol_export_and_nothing_more() -> None:
    """A top-level symbol export passes; one more word in its string is host asm again.

    libstdc++ 13's <iostream> writes one (found on the device host, whose GCC is 13: every expert was
    refused there before).
    """
    clean = TRANSLATION.replace('__asm__ volatile("nop")', "")
    export = '  __extension__ __asm (".globl _ZSt21ios_base_library_initv");\n'
    iostream = '# 82 "/usr/include/c++/13/iostream" 3\n' + export
    assert host_asm_in_translation(clean + iostream) is None
    assert host_asm_in_translation(clean + iostream, preprocessed=True) is None
    for string in ('.globl x\\n.incbin \\"/etc/passwd\\"', ".globl x; nop", ".globl x y", ".weak x"):
        found = host_asm_in_translation(clean + f'__asm ("{string}");\n')
        assert found is not None, string


PROPERTY_NOTE = (  # as GCC 12 writes it with -fcf-protection (the default of Ubuntu's GCC)
    '\t.section\t.note.gnu.property,"a"\n\t.align 8\n\t.long\t1f - 0f\n\t.long\t4f - 1f\n\t.long\t5\n0:\n'
    '\t.string\t"GNU"\n1:\n\t.align 8\n\t.long\t0xc0000002\n\t.long\t3f - 2f\n2:\n\t.long\t0x3\n3:\n'
    "\t.align 8\n4:\n"
)
FATBIN = '#APP\n\t.section .nv_fatbin, "a"\n.align 8\nfatbinData:\n.quad 0x1,0x2\n.quad 0x3, 0x4\n.text\n\n'
TRAILER = '\t.ident\t"GCC: (Debian 12.2.0-14+deb12u1) 12.2.0"\n\t.section\t.note.GNU-stack,"",@progbits\n'


def test_assembly_backstop_allows_nvcc_s_fatbinary_and_nothing_else() -> None:
    """GCC brackets every inline asm with #APP: what the compiler saw, whatever the spelling."""
    assert host_asm_in_assembly("\t.text\n" + FATBIN + "#NO_APP\n\tmovl $1, %eax\n") is None
    assert host_asm_in_assembly("\t.text\n" + FATBIN + TRAILER) is None  # the last block: no #NO_APP
    # Ubuntu's GCC 13 adds the GNU property note (-fcf-protection): the device host refused every expert
    assert host_asm_in_assembly("\t.text\n" + FATBIN + TRAILER + PROPERTY_NOTE) is None
    assert host_asm_in_assembly("\t.text\n" + FATBIN + TRAILER + PROPERTY_NOTE + "\tnop\n") is not None
    found = host_asm_in_assembly(FATBIN + "#NO_APP\n#APP\n\tsyscall\n#NO_APP\n")
    assert found is not None and found[1] == "syscall"
    assert host_asm_in_assembly(FATBIN + "#NO_APP\n" + FATBIN + "#NO_APP\n") is not None  # a second one
    assert host_asm_in_assembly(FATBIN + "\tnop\n" + TRAILER) is not None  # appended to the last block
    unclosed = "\t.text\n#APP\n\tmovl $0x1337, %eax\n" + TRAILER
    assert host_asm_in_assembly(unclosed) == (2, "movl $0x1337, %eax")
    directives = ('.incbin "/etc/passwd"', ".irp d,incbin", ".macro m", '.include "x"', ".mri 1")
    # GAS's other spellings of the loops (a reviewer's `.irep q,incbin` / `.\q "/etc/ld.so.cache"`)
    directives += (".irep q,incbin", ".irepc q,ab", ".rep 2", ".IREP q,x", ".altmacro", ".ifdef x")
    directives += ('.print "x"', '.warning "x"', '.error "x"', ".endr")
    for directive in directives:
        assert host_asm_in_assembly(f"\t.section\t.rodata.x\n{directive}\n") is not None
    # anywhere outside a string, in any case: after a label, after a `;` (GCC writes neither)
    for line in ('lbl: .incbin "/etc/passwd"', '"odd sym": .INCBIN "x"', '\t.section\t.x,"a";.INCBIN "x"'):
        assert host_asm_in_assembly(f"\t.text\n{line}\n") is not None, line
    assert host_asm_in_assembly('\t.string\t"a .incbin; b"\n') is None  # inside a string: data
    # the assembler reads '" as the character " (no string starts): what follows is statements
    char = '\t.section\t.rodata.leak,"a"\n.byte \'" ; .incbin "/etc/x" # ","aw"\n'
    assert host_asm_in_assembly(char) is not None
    assert host_asm_in_assembly('\t.string\t"it\'s data"\n') is None
    # block comments: the assembler deletes them (joining what they split) and reads no quote inside
    quoted = '/* " */ .incbin "/etc/ld.so.cache" /* " */'
    for line in ('.inc/**/bin "/etc/ld.so.cache"', quoted, "x /*", "*/"):
        assert host_asm_in_assembly(f"\t.section\t.rodata.x\n{line}\n") is not None, line
    assert host_asm_in_assembly('\t.string\t"a /* b */ c"\n') is None  # inside a string: data
    # a line may begin only with a directive GCC writes (an eighth review's `.irep`, in a section name)
    for line in (".irep q,incbin", ".fill 1,1,1", '.INCBIN "x"', ".Text", ".equ x, 1", ".mri 1"):
        assert host_asm_in_assembly(f"\t.section\t.rodata.x\n{line}\n") is not None, line
    gcc = '\t.text\n.LFB0:\n\t.cfi_startproc\n\t.p2align 4\n0:\n\t.string "GNU"\n'
    gcc += "\t.uleb128 .LLSDACSE0-.LLSDACSB0\n"
    assert host_asm_in_assembly(gcc) is None
    # a string the line ends inside: the assembler carries it over the newline, so what follows is code
    newline = '\t.section\t"abc\ndef";.incbin "/etc/ld.so.cache";.section .rodata.y,"aw"\n'
    assert host_asm_in_assembly(newline) == (1, '.section\t"abc')
    assert host_asm_in_assembly('\t.string\t"a\\"\n') is not None  # its closing quote escaped
    assert host_asm_in_assembly('\t.string\t"a\\\\"\n') is None  # an escaped backslash, then the quote
    # GCC merges top-level asm into one block: libstdc++ 13's symbol export lands before the fatbinary
    export = "#APP\n\t.globl _ZSt21ios_base_library_initv\n"
    assert host_asm_in_assembly(export + FATBIN[5:] + "#NO_APP\n") is None
    assert host_asm_in_assembly(export + "#NO_APP\n" + FATBIN + TRAILER) is None
    assert host_asm_in_assembly(export + "\tnop\n#NO_APP\n" + FATBIN + TRAILER) is not None
    assert host_asm_in_assembly(export + FATBIN[5:] + "#NO_APP\n" + export + "#NO_APP\n") is None
    in_body = '#APP\n# 3 "kernel.cu" 1\n\t.globl x\n# 0 "" 2\n#NO_APP\n'  # an asm statement, not top level
    assert host_asm_in_assembly(FATBIN + "#NO_APP\n" + in_body) is not None


def _solution(code: str) -> Solution:
    return Solution(
        name="asm",
        definition="asm",
        author="ptxgym-tests",
        spec=BuildSpec(
            language=SupportedLanguage.CUDA,
            target_hardware=["sm_90a"],
            entry_point="kernel.cu::run",
            binding="tvm-ffi",
        ),
        sources=[SourceFile(path="kernel.cu", content=code)],
    )


HEAD = "#include <tvm/ffi/container/tensor.h>\n#include <tvm/ffi/function.h>\n"
TAIL = "void run(tvm::ffi::TensorView a) {}\nTVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);\n"


@pytest.mark.nvcc
def test_an_asm_label_from_a_header_macro_is_judged_by_what_it_names() -> None:
    """An asm label from a header macro builds or not by what it names.

    glibc's __REDIRECT expands to an asm label (a symbol's name, no instruction): the import check judges
    the name, so a label to an allowed function builds and one to dlopen does not.
    """
    allowed = HEAD + '#include <sys/cdefs.h>\nextern "C" int __REDIRECT(my_puts, (const char*), puts);\n'
    allowed += 'void use() { my_puts("x"); }\n' + TAIL
    built = build_solution(_solution(allowed), HOPPER, use_cache=False)
    assert built.ok, built.message
    banned = allowed.replace("puts);", "dlopen);").replace('my_puts("x")', 'my_puts("libcublas.so")')
    outcome = build_solution(_solution(banned), HOPPER, use_cache=False)
    assert outcome.status is Status.STATIC_REJECT and "dlopen" in outcome.message, outcome.message


HOST_HEAVY = r"""
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
#include <algorithm>
static std::map<std::string, int> table;
struct S { virtual ~S() {} virtual int f() { return 1; } };
thread_local int tl = 3;
__global__ void k(float* a, int n) { int i = threadIdx.x; if (i < n) a[i] = sqrtf(a[i]); }
void run(tvm::ffi::TensorView a) {
  std::vector<double> v(10, 1.5); std::ostringstream os; os << v[0] << 2.5f;
  auto u = std::make_unique<S>(); table["x"] = u->f() + tl;
  std::sort(v.begin(), v.end(), [](double x, double y) { return x > y; });
  if (table.size() > 100) throw std::runtime_error(os.str());
  static const double c[] = {1.0, 2.0, 3.0}; tl += static_cast<int>(c[table.size() % 3]);
  k<<<1, 32>>>(static_cast<float*>(a.data_ptr()), 32);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
"""


@pytest.mark.nvcc
def test_host_heavy_honest_code_passes_the_assembly_allowlist() -> None:
    """Every directive GCC writes for host C++ begins a line the assembly check allows.

    Streams, containers, exceptions, statics, thread-locals and lambdas (``GCC_DIRECTIVES``).
    """
    built = build_solution(_solution(HEAD + HOST_HEAVY), HOPPER, use_cache=False)
    assert built.ok, built.message


@pytest.mark.nvcc
def test_a_build_with_control_flow_protection_passes_the_backstop(monkeypatch) -> None:
    """A build with -fcf-protection (Ubuntu GCC's default) passes the backstop.

    GCC then writes the GNU property note after the last top-level asm: the device host's build of every
    expert was refused until the note was known.
    """
    import ptxgym.cpu.build as build

    monkeypatch.setattr(build, "KEEP_FLAGS", (*build.KEEP_FLAGS, "-Xcompiler", "-fcf-protection"))
    built = build_solution(_solution(HEAD + "#include <iostream>\n" + TAIL), HOPPER, use_cache=False)
    assert built.ok, built.message


@pytest.mark.nvcc
def test_a_top_level_symbol_export_builds_as_libstdcxx_13_writes_it() -> None:
    """<iostream> of GCC 13 holds ``__asm (".globl _ZSt21ios_base_library_initv")``: the build passes it.

    This host's GCC 12 lacks the line, so the source carries it (the screen, which reads only the
    candidate's files, is off).
    """
    export = '__extension__ __asm (".globl _ZSt21ios_base_library_initv");\n'
    built = build_solution(_solution(HEAD + export + TAIL), HOPPER, screen=False, use_cache=False)
    assert built.ok, built.message


@pytest.mark.nvcc
@pytest.mark.slow  # ~10 s of nvcc
def test_backstop_catches_host_asm_past_the_screen_and_keeps_device_asm() -> None:
    host = (
        HEAD
        + 'void run(tvm::ffi::TensorView a) { asm volatile("nop"); }\n'
        + "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);\n"
    )
    outcome = build_solution(_solution(host), HOPPER, screen=False, use_cache=False)
    assert (
        outcome.status is Status.STATIC_REJECT
        and "host-asm" in outcome.message
        and "kernel.cu:3" in outcome.message
    )
    device = (
        HEAD
        + "__host__ __device__ inline unsigned lane() {\n#ifdef __CUDA_ARCH__\n"
        + '  unsigned r; asm volatile("mov.u32 %0, %%laneid;" : "=r"(r)); return r;\n'
        + "#else\n  return 0;\n#endif\n}\n"
        + '__global__ void k(unsigned* o) { o[0] = lane(); asm volatile("membar.gl;"); }\n'
        + TAIL
    )
    built = build_solution(_solution(device), HOPPER, use_cache=False)
    assert built.ok, built.message
    assert not any(built.so_path.parent.glob(".ptxgym-keep*")), "nvcc's kept files must not outlive the build"


def _chain(n: int, last_use: str) -> str:
    """n forwarding macros defined in reverse order (each resolved only after the next), then a use."""
    defs = "".join(f"#define P{i + 1}(a,b) P{i}(a,b)\n" for i in reversed(range(n)))
    return defs + f"#define P0(a,b) a##b\nvoid f() {{ {last_use} }}\n"


@pytest.mark.parametrize(
    ("code", "ok"),
    [
        (_chain(5000, "P5000(x, y);"), True),
        (_chain(5000, 'P5000(a, sm)("nop");'), False),
        (
            "".join(f"#define M{i} M{i + 1}\n" for i in range(12000))
            + '#define M12000 asm("")\nvoid g() { M0; }',
            False,
        ),
        ("#define J(a,b) a##b\nvoid f() {" + " J(" * 30000 + "}\n", False),  # unclosed: may hold anything
        ("#define J(a,b) a##b\nvoid f() {" + " J(x," * 20000 + ")" * 20000 + "}\n", False),
        ("template <" * 25000 + ' __device__ void f() { asm(""); }', False),
        (
            "__host__ __device__ void f() {\n#ifdef __CUDA_ARCH__\n"
            + 'asm("nop");\n' * 20000
            + "#endif\n}\n",
            True,
        ),
    ],
)
def test_hostile_shapes_stay_fast_and_conservative(code: str, ok: bool) -> None:
    start = time.perf_counter()
    verdict = check_source(code)
    assert time.perf_counter() - start < 5.0
    assert verdict.ok is ok, verdict.message


def test_the_backstop_fails_closed_when_nvcc_left_nothing_to_read(tmp_path) -> None:
    from ptxgym.cpu.build import _host_asm_backstop

    verdict = _host_asm_backstop(tmp_path, ["src/kernel.cu"])
    assert verdict is not None and "kernel.cudafe1.cpp" in verdict.message
    for name in ("kernel.cudafe1.cpp", "kernel.ii", "kernel.s", "kernel_dlink.s"):
        (tmp_path / name).write_text("\t.text\n")
    assert _host_asm_backstop(tmp_path, ["src/kernel.cu"]) is None


def test_a_brace_in_a_dead_branch_does_not_make_host_code_device_code() -> None:
    """Each conditional group leaves the scopes as they were at its #if.

    A reviewer's `#if 0` holding `__device__ void fake() {` put the top-level asm after it in a "device body".
    """
    dead = '#if 0\n__device__ void fake() {\n#endif\nasm(".globl x");\n#if 0\n}\n#endif\n'
    found = find_host_asm({"kernel.cu": dead})
    assert found is not None and "file or namespace scope" in found.what
    # a head counts from its last conditional: `__device__ void f()` in a dead branch made `g` look device
    head = '#if 0\n__device__ void f()\n#else\nvoid g()\n#endif\n{ asm volatile("nop"); }\n'
    assert find_host_asm({"kernel.cu": head}) is not None
    attribute = '#if 0\n__device__\n#endif\nvoid h() { asm volatile("nop"); }\n'
    assert find_host_asm({"kernel.cu": attribute}) is not None
    branches = (
        '__global__ void k(int* a) {\n#if 1\n  asm("membar.gl;");\n#else\n  asm("membar.cta;");\n#endif\n}\n'
    )
    assert find_host_asm({"kernel.cu": branches}) is None  # balanced groups change nothing
