"""The binding's C mirror against chordrt.h: every struct (found in the header, in the binding's registry
and by scanning the package's modules) has one ctypes mirror with the header's fields, and a C probe
compiled against the header agrees with ctypes on every size, field offset, field size and minimum size
(CHORD_*_MIN_SIZE); every function of the header is declared with a matching prototype. CPU only.
"""

from __future__ import annotations

import ctypes
import importlib
import inspect
import pkgutil
import re
import shutil
import subprocess

import pytest

from conftest import HEADER, REPO_ROOT


def _strip_comments(text):
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def _header_structs(header_text):
    """C typedef name -> field names in order, for every `typedef struct ... {} chord_*_t;`."""
    out = {}
    for body, name in re.findall(r"typedef struct \w+ \{(.*?)\} (\w+);", _strip_comments(header_text), re.S):
        fields = []
        for decl in body.split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            first, *rest = decl.split(",")
            fields.append(first.split()[-1].lstrip("*"))
            fields += [r.strip().lstrip("*") for r in rest]
        out[name] = fields
    return out


def _header_min_sizes(header_text):
    """C typedef name -> its CHORD_*_MIN_SIZE macro's name."""
    out = {}
    for macro, body in re.findall(r"#define\s+(CHORD_\w+_MIN_SIZE)\s+(.*)", _strip_comments(header_text)):
        types = re.findall(r"\bchord_\w+_t\b", body)
        assert len(types) == 1, f"{macro} names no single struct: {body}"
        assert types[0] not in out, f"{types[0]} has two MIN_SIZE macros"
        out[types[0]] = macro
    return out


def _package_modules(chord):
    """The binding's modules (the leading-underscore ones; the *_reference modules need torch)."""
    names = [m.name for m in pkgutil.iter_modules(chord.__path__) if m.name.startswith("_")]
    assert {"_core", "_glue"} <= set(names)
    return [importlib.import_module(f"{chord.__name__}.{name}") for name in names]


def _scanned_mirrors(chord):
    """Every ctypes.Structure class with fields defined in the package's modules, by module:qualname."""
    found = {}
    for module in _package_modules(chord):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, ctypes.Structure) and cls.__module__ == module.__name__ and "_fields_" in cls.__dict__:
                found[f"{cls.__module__}:{cls.__qualname__}"] = cls
    return found


def test_header_parsers_find_what_a_grep_finds(header_text):
    # The parser above must not silently miss a struct whose declaration it does not understand.
    grepped = set(re.findall(r"\} (chord_\w+_t);", header_text))
    enums = set(re.findall(r"typedef enum \w+ \{.*?\} (chord_\w+_t);", _strip_comments(header_text), re.S))
    structs = _header_structs(header_text)
    assert grepped - enums == set(structs)
    assert len(structs) >= 10
    assert {"chord_moe_align_args_t", "chord_silu_and_mul_args_t", "chord_moe_combine_args_t"} <= set(structs)
    assert len(_header_min_sizes(header_text)) >= 5


def test_every_header_struct_has_one_mirror(chord, header_text):
    structs = _header_structs(header_text)
    assert set(chord.STRUCTS) == set(structs)
    scanned = _scanned_mirrors(chord)
    # Every struct class in the package is a registered mirror, and no mirror is defined twice.
    unregistered = [name for name, cls in scanned.items() if cls not in chord.STRUCTS.values()]
    assert not unregistered, f"ctypes structs that mirror no chordrt.h struct: {unregistered}"
    assert sorted(c._c_name_ for c in scanned.values()) == sorted(structs)
    for name, fields in structs.items():
        mirror = chord.STRUCTS[name]
        assert mirror._c_name_ == name
        assert issubclass(mirror, chord._core.SizedStruct), name
        assert [f[0] for f in mirror._fields_] == fields, name
        assert fields[0] == "struct_size", name


def test_min_size_macros_match_the_mirrors(chord, header_text):
    macros = _header_min_sizes(header_text)
    for c_name, macro in macros.items():
        assert c_name in chord.STRUCTS, macro
        assert macro == "CHORD_" + c_name[len("chord_"):-len("_t")].upper() + "_MIN_SIZE", (c_name, macro)
    for c_name, mirror in chord.STRUCTS.items():
        if c_name not in macros:  # no macro yet (a family still on ABI 1): the whole struct is required
            assert mirror._min_field_ is None, c_name
        if mirror._min_field_ is not None:
            assert mirror._min_field_ in [f[0] for f in mirror._fields_], c_name
            assert mirror.min_size() < ctypes.sizeof(mirror), c_name


def test_struct_size_is_set_automatically(chord):
    for mirror in chord.STRUCTS.values():
        assert mirror().struct_size == ctypes.sizeof(mirror)
        assert mirror(struct_size=3).struct_size == 3


def test_layouts_match_a_c_compiler(chord, header_text, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler")
    macros = _header_min_sizes(header_text)
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <chordrt/chordrt.h>", "int main(void) {"]
    expected = []  # (what, value from ctypes), one per printed line

    def probe(what, c_expr, value):
        lines.append(f'  printf("%zu\\n", (size_t)({c_expr}));')
        expected.append((what, value))

    for c_name, mirror in sorted(chord.STRUCTS.items()):
        probe(f"sizeof({c_name})", f"sizeof({c_name})", ctypes.sizeof(mirror))
        probe(f"_Alignof({c_name})", f"_Alignof({c_name})", ctypes.alignment(mirror))
        for field, _ in mirror._fields_:
            desc = getattr(mirror, field)
            probe(f"offsetof({c_name}, {field})", f"offsetof({c_name}, {field})", desc.offset)
            probe(f"sizeof({c_name}.{field})", f"sizeof((({c_name}*)0)->{field})", desc.size)
        if c_name in macros:
            probe(macros[c_name], macros[c_name], mirror.min_size())
    lines += ["  return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run(
        [cc, "-std=c11", "-Wall", "-Werror", "-I", str(REPO_ROOT / "runtime" / "include"), str(src), "-o", str(exe)],
        check=True,
    )
    got = [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]
    assert len(got) == len(expected)
    mismatches = [f"{what}: C {c}, ctypes {py}" for (what, py), c in zip(expected, got) if c != py]
    assert not mismatches, "\n".join(mismatches)
    assert str(HEADER).endswith("runtime/include/chordrt/chordrt.h")


def _header_functions(header_text):
    out = {}
    pattern = r"CHORD_API\s+([\w\s\*]+?)\s*\b(chord_\w+)\s*\(([^)]*)\)\s*;"
    for ret, name, params in re.findall(pattern, _strip_comments(header_text), re.S):
        params = " ".join(params.split())
        out[name] = (" ".join(ret.split()), [] if params in ("", "void") else [p.strip() for p in params.split(",")])
    return out


def _ctype_of(c_type, chord):
    """The ctypes type a C parameter or return type must be declared as."""
    c_type = " ".join(c_type.replace("*", " * ").split()).replace(" *", "*")
    scalars = {
        "void": None,
        "chord_status_t": ctypes.c_int,
        "int": ctypes.c_int,
        "int32_t": ctypes.c_int32,
        "int64_t": ctypes.c_int64,
        "size_t": ctypes.c_size_t,
        "const char*": ctypes.c_char_p,
        "int*": ctypes.POINTER(ctypes.c_int),
        "int32_t*": ctypes.POINTER(ctypes.c_int32),
        "size_t*": ctypes.POINTER(ctypes.c_size_t),
        "CUstream": ctypes.c_void_p,
    }
    if c_type in scalars:
        return scalars[c_type]
    m = re.fullmatch(r"(?:const )?(chord_\w+_t)\*", c_type)
    if m:
        return ctypes.POINTER(chord.STRUCTS[m.group(1)])
    if c_type.endswith("*"):  # a device pointer (any pointee): an integer address
        return ctypes.c_void_p
    pytest.fail(f"C type {c_type!r} not covered by this test")


def test_every_header_function_is_declared(chord, header_text):
    functions = _header_functions(header_text)
    assert len(functions) >= 10
    assert set(functions) == set(chord.FUNCTIONS)
    lib = chord.lib()
    for name, (ret, params) in functions.items():
        fn = getattr(lib, name)
        restype, argtypes = chord.FUNCTIONS[name]
        assert fn.restype is restype and tuple(fn.argtypes) == tuple(argtypes), name
        assert restype is _ctype_of(ret, chord), name
        # A parameter is "type name"; the name is dropped before mapping the type.
        c_params = [re.sub(r"\s*\b\w+$", "", p) for p in params]
        assert argtypes == [_ctype_of(p, chord) for p in c_params], (name, c_params, argtypes)
