"""Inputs found by tests/fuzz/fuzz_convert.py that once made tools/convert.py misbehave, rebuilt
here from the test checkpoints so they stay fixed. Each must be refused with exit status 1, a
"convert.py: error: ..." line last on stderr, no traceback and no output file.

Run from tests/python:  python3 -m unittest -v test_fuzz_regressions
"""
import io
import os
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONVERT = os.path.join(ROOT, "tools", "convert.py")
CKPTS = os.path.join(ROOT, "tests", "data", "checkpoints")


class FuzzRegressions(unittest.TestCase):
    def assert_refused(self, ckpt_bytes):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "ckpt.pt")
            out = os.path.join(tmp, "out")
            os.mkdir(out)
            with open(src, "wb") as f:
                f.write(ckpt_bytes)
            proc = subprocess.run([sys.executable, CONVERT, src, "-o", os.path.join(out, "m.gguf")],
                                  capture_output=True, text=True, timeout=120)
            self.assertNotIn("Traceback", proc.stderr)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            self.assertTrue(proc.stderr.strip().splitlines()[-1].startswith("convert.py: error: "), proc.stderr)
            self.assertEqual(os.listdir(out), [])

    def test_zip_member_name_that_is_not_utf8_is_refused_cleanly(self):
        # The zip's UTF-8 flag is set but the name is not UTF-8: zipfile raised UnicodeDecodeError.
        with zipfile.ZipFile(os.path.join(CKPTS, "nobias.pt")) as z:
            members = [(info.filename, z.read(info)) for info in z.infolist()]
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for name, content in members:
                z.writestr("\u00e9" + name, content)  # non-ASCII: written with the UTF-8 flag
        data = buf.getvalue().replace("\u00e9".encode(), b"\x80\x80")
        self.assert_refused(data)

    def test_zip_entry_flagged_as_compressed_patched_data_is_refused_cleanly(self):
        # zipfile raises NotImplementedError for general-purpose flag bit 5 when a member is opened.
        with open(os.path.join(CKPTS, "nobias.pt"), "rb") as f:
            data = bytearray(f.read())
        start = data.index(b"PK\x01\x02")
        for pos in range(start, len(data) - 4):
            if data[pos:pos + 4] == b"PK\x01\x02":
                data[pos + 8] |= 0x20
        self.assert_refused(bytes(data))

    def test_pickle_memo_index_near_4g_is_refused_cleanly(self):
        # LONG_BINPUT with index 0xd5b90103: the unpickler grew its memo to match and raised MemoryError.
        pkl = b"\x80\x02N" + b"r" + (0xd5b90103).to_bytes(4, "little") + b"."
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("ckpt/data.pkl", pkl)
            z.writestr("ckpt/version", "3\n")
        self.assert_refused(buf.getvalue())


if __name__ == "__main__":
    unittest.main()
