#!/usr/bin/env python3
"""Writes the seed corpora of the fuzzers: fuzz/fuzz_npy.c's into
fuzz/corpus/npy/ (small .npy files, valid ones of every dtype and format
version the loader takes and broken ones of each kind it must reject), and
likewise fuzz/fuzz_safetensors.c's into fuzz/corpus/safetensors/ and
fuzz/fuzz_npz.c's into fuzz/corpus/npz/ (stored and deflated archives,
written with zipfile at a fixed date). Standard library only (no numpy):
the headers are written as numpy writes them, byte for byte.

    python3 fuzz/make_seeds.py        # from the top of the source tree

Beside these the directory holds what the fuzzer added, which this script
leaves be: the inputs it crashed on, as fuzz_regress_*.npy (also in
tests/fixtures/, where tests/check_fuzz_regress.c loads them), and the inputs
that reached new code, named by their SHA-1 as libFuzzer names them, kept
after `fuzz_npy -merge=1` minimized the corpus."""
import io
import json
import os
import struct
import zipfile

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "npy")


def header_dict(descr, shape, fortran="False"):
    if len(shape) == 1:
        shape_repr = "(%d,)" % shape[0]
    else:
        shape_repr = "(" + ", ".join(str(d) for d in shape) + ")"
    return "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, fortran, shape_repr)


def npy(text, data=b"", version=(1, 0)):
    """Magic, version, header length, the header text padded with spaces and
    a newline to a multiple of 64 bytes, then data."""
    text = text.encode("latin-1") if isinstance(text, str) else text
    prefix = 10 if version[0] == 1 else 12
    total = ((prefix + len(text) + 1 + 63) // 64) * 64
    body = text + b" " * (total - prefix - len(text) - 1) + b"\n"
    length = (struct.pack("<H", len(body)) if version[0] == 1
              else struct.pack("<I", len(body)))
    return b"\x93NUMPY" + bytes(version) + length + body + data


def f8(*xs):
    return struct.pack("<%dd" % len(xs), *xs)


def f4(*xs):
    return struct.pack("<%df" % len(xs), *xs)


def i8(*xs):
    return struct.pack("<%dq" % len(xs), *xs)


SEEDS = {
    # ---- valid --------------------------------------------------------
    "ok_f4_2x3": npy(header_dict("<f4", (2, 3)), f4(1, 2, 3, 4, 5, 6)),
    "ok_f8_4": npy(header_dict("<f8", (4,)), f8(0.5, -1, float("inf"), 3)),
    "ok_b1_3": npy(header_dict("|b1", (3,)), b"\x01\x00\x01"),
    "ok_u1_2x2": npy(header_dict("|u1", (2, 2)), b"\x00\x01\x01\x00"),
    "ok_i8_2": npy(header_dict("<i8", (2,)), i8(-7, 1 << 40)),
    "ok_0d_f8": npy(header_dict("<f8", ()), f8(42)),
    "ok_empty_f4": npy(header_dict("<f4", (0,))),
    "ok_empty_2x0x3": npy(header_dict("<f8", (2, 0, 3))),
    "ok_8dims": npy(header_dict("<f4", (1, 1, 1, 1, 1, 1, 1, 2)), f4(1, 2)),
    "ok_v2_f8": npy(header_dict("<f8", (2,)), f8(1, 2), version=(2, 0)),
    "ok_v3_f4": npy(header_dict("<f4", (1,)), f4(7), version=(3, 0)),
    "ok_keys_reordered": npy(
        "{\"shape\": (2,), 'descr': \"<i8\", 'fortran_order': False}",
        i8(1, 2)),
    "ok_trailing_comma_shape": npy("{'descr': '<f4', 'fortran_order': False,"
                                   " 'shape': (1, 2,), }", f4(1, 2)),
    # ---- broken: the file itself ---------------------------------------
    "bad_empty": b"",
    "bad_short": b"\x93NUMP",
    "bad_magic": b"\x93NUMPZ" + npy(header_dict("<f8", (1,)), f8(1))[6:],
    "bad_version_4": npy(header_dict("<f8", (1,)), f8(1), version=(4, 0)),
    "bad_version_1_1": npy(header_dict("<f8", (1,)), f8(1), version=(1, 1)),
    "bad_hlen_past_eof": b"\x93NUMPY\x01\x00\xff\xff{'descr'",
    "bad_v2_hlen_huge": b"\x93NUMPY\x02\x00\xff\xff\xff\xff{}",
    "bad_no_hlen_v2": b"\x93NUMPY\x02\x00\x10\x00",
    "bad_data_truncated": npy(header_dict("<f8", (3,)), f8(1, 2)),
    "bad_trailing_bytes": npy(header_dict("<f8", (1,)), f8(1, 2)),
    "bad_lying_shape": npy(header_dict("<f4", (1000, 1000)), f4(1)),
    "bad_huge_shape": npy(header_dict("<f8", (1 << 40, 1 << 40)), f8(1)),
    "bad_overflow_dim": npy(header_dict("<f8", (99999999999999999999,))),
    "edge_huge_dims_empty": npy(header_dict("<f8", (0, 1 << 62, 1 << 62))),
    "bad_bool_value": npy(header_dict("|b1", (2,)), b"\x01\x02"),
    # ---- broken: the header dict ----------------------------------------
    "bad_not_dict": npy("['descr', '<f8']", f8(1)),
    "bad_missing_shape": npy("{'descr': '<f8', 'fortran_order': False, }",
                             f8(1)),
    "bad_duplicate_key": npy("{'descr': '<f8', 'descr': '<f8', "
                             "'fortran_order': False, 'shape': (1,), }",
                             f8(1)),
    "bad_unknown_key": npy("{'descr': '<f8', 'fortran_order': False, "
                           "'shape': (1,), 'extra': 1, }", f8(1)),
    "bad_fortran_true": npy(header_dict("<f8", (2, 2), "True"),
                            f8(1, 2, 3, 4)),
    "bad_big_endian": npy(header_dict(">f8", (1,)), f8(1)),
    "bad_dtype_i4": npy(header_dict("<i4", (1,)), b"\x01\x00\x00\x00"),
    "bad_unterminated_string": npy("{'descr: '<f8', }", f8(1)),
    "bad_backslash": npy("{'de\\scr': '<f8', 'fortran_order': False, "
                         "'shape': (1,), }", f8(1)),
    "bad_shape_not_tuple": npy("{'descr': '<f8', 'fortran_order': False, "
                               "'shape': (5), }", f8(1, 2, 3, 4, 5)),
    "bad_negative_dim": npy(header_dict("<f8", (-1,)), f8(1)),
    "bad_9_dims": npy(header_dict("<f8", (1,) * 9), f8(1)),
    "bad_text_after_dict": npy(header_dict("<f8", (1,)) + " x", f8(1)),
    "bad_unterminated_dict": npy("{'descr': '<f8', 'fortran_order': False",
                                 f8(1)),
    "bad_high_byte": npy(b"{'descr': '<f8\xe9', 'fortran_order': False, "
                         b"'shape': (1,), }", f8(1)),
}


def safetensors(header, data=b"", pad=True, hlen=None):
    """8 bytes of header length, the JSON (padded with spaces to a multiple
    of 8 as the reference writer pads it), the data."""
    text = header if isinstance(header, bytes) else json.dumps(
        header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text) if hlen is None else hlen) + text + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}


META = {"format": "pt"}

SAFETENSORS_SEEDS = {
    "ok_f32": safetensors({"__metadata__": META, "w": t("F32", (2, 3), 0, 24)},
                          f4(1, 2, 3, 4, 5, 6)),
    "ok_mixed": safetensors({"b": t("F64", (2,), 0, 16),
                             "i": t("I64", (1,), 16, 24),
                             "w": t("F32", (1,), 24, 28),
                             "h": t("BF16", (2,), 28, 32),
                             "f": t("F16", (2,), 32, 36)},
                            f8(1, -2) + i8(1 << 60) + f4(0.5) +
                            b"\x80\x3f\x00\xc0" + b"\x00\x3c\x01\x00"),
    "ok_scalar_and_empty": safetensors({"s": t("F32", (), 0, 4),
                                        "e": t("F64", (0, 3), 4, 4)}, f4(2)),
    "ok_no_tensors": safetensors({"__metadata__": {}}),
    "ok_unpadded": safetensors({"a": t("I64", (1,), 0, 8)}, i8(5), pad=False),
    "bad_empty": b"",
    "bad_short": b"\x02\x00\x00",
    "bad_hlen_past_eof": safetensors({"a": t("F32", (1,), 0, 4)}, f4(1),
                                     hlen=1 << 40),
    "bad_json": safetensors(b'{"a":{"dtype":"F32",'),
    "bad_not_object": safetensors(b"[1,2,3]"),
    "bad_duplicate": safetensors(b'{"a":{"dtype":"F32","shape":[1],'
                                 b'"data_offsets":[0,4]},"a":{"dtype":"F32",'
                                 b'"shape":[1],"data_offsets":[0,4]}}', f4(1)),
    "bad_out_of_range": safetensors({"a": t("F32", (2,), 0, 8)}, f4(1)),
    "bad_overlap": safetensors({"a": t("F32", (2,), 0, 8),
                                "b": t("F32", (2,), 4, 12)}, f4(1, 2, 3)),
    "bad_gap": safetensors({"a": t("F32", (1,), 0, 4),
                            "b": t("F32", (1,), 8, 12)}, f4(1, 2, 3)),
    "bad_unaligned": safetensors({"h": t("BF16", (1,), 0, 2),
                                  "a": t("F32", (1,), 2, 6)}, b"\0" * 6),
    "bad_size_mismatch": safetensors({"a": t("F32", (3,), 0, 8)}, f4(1, 2)),
    "bad_unknown_dtype": safetensors({"a": t("X9", (1,), 0, 4)}, f4(1)),
    "ok_i32": safetensors({"a": t("I32", (1,), 0, 4)}, f4(1)),
    "ok_u8_bool": safetensors({"m": t("BOOL", (3,), 0, 3),
                               "u": t("U8", (2,), 3, 5)}, b"\x01\x00\x01\xff\x07"),
    "bad_bool_byte": safetensors({"m": t("BOOL", (2,), 0, 2)}, b"\x01\x02"),
    "bad_u64": safetensors({"a": t("U64", (1,), 0, 8)}, i8(5)),
    "bad_leftover": safetensors({"a": t("F32", (1,), 0, 4)}, f4(1, 2)),
    "bad_huge_shape": safetensors({"a": t("F32", (1 << 40, 1 << 40), 0, 4)},
                                  f4(1)),
    "bad_9_dims": safetensors({"a": t("F32", (1,) * 9, 0, 4)}, f4(1)),
    "bad_negative_dim": safetensors({"a": t("F32", (-1,), 0, 4)}, f4(1)),
}


def npz(entries, method=zipfile.ZIP_STORED):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            z.writestr(info, data)
    return out.getvalue()


NPZ_SEEDS = {
    "ok_stored": npz({"w.npy": SEEDS["ok_f4_2x3"], "b.npy": SEEDS["ok_i8_2"]}),
    "ok_deflated": npz({"w.npy": SEEDS["ok_f8_4"],
                        "m.npy": SEEDS["ok_b1_3"]}, zipfile.ZIP_DEFLATED),
    "ok_empty_archive": npz({}),
    "bad_empty": b"",
    "bad_not_npy": npz({"w.npy": b"not a .npy file"}),
    "bad_not_named_npy": npz({"w.txt": SEEDS["ok_f4_2x3"]}),
    "bad_truncated": npz({"w.npy": SEEDS["ok_f4_2x3"]})[:-30],
    "bad_bzip2": npz({"w.npy": SEEDS["ok_f4_2x3"]}, zipfile.ZIP_BZIP2),
}


def write_all(folder, seeds, suffix):
    out = os.path.join(os.path.dirname(OUT), folder)
    os.makedirs(out, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(out, name + suffix), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(seeds), out))


def main():
    write_all("npy", SEEDS, ".npy")
    write_all("safetensors", SAFETENSORS_SEEDS, ".safetensors")
    write_all("npz", NPZ_SEEDS, ".npz")


if __name__ == "__main__":
    main()
