"""bindings/csharp as a Unity package (UPM): its package.json and assembly definition are what
Unity reads, the samples it names exist, the versions agree with the library's, and the NPC
sample compiles with mcs against tests/shared/UnityEngineStub.cs (a stub of the few UnityEngine
types it uses: Unity itself is not on these machines, so the package is untested in Unity).
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "bindings", "csharp")


def read_json(name):
    with open(os.path.join(PACKAGE, name), encoding="utf-8") as f:
        return json.load(f)


class UnityPackage(unittest.TestCase):
    def test_package_json_is_a_upm_manifest_whose_samples_exist(self):
        manifest = read_json("package.json")
        self.assertRegex(manifest["name"], r"^com(\.[a-z0-9-]+){2,}$")  # UPM's reverse-domain, lower-case names
        self.assertRegex(manifest["unity"], r"^\d{4}\.\d$")
        with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
            project = re.search(r"project\(gpt2h VERSION (\d+\.\d+\.\d+)", f.read()).group(1)
        self.assertEqual(manifest["version"], project, "the package's version is the library's")
        self.assertTrue(manifest["samples"])
        for sample in manifest["samples"]:
            self.assertTrue(sample["path"].startswith("Samples~/"), sample["path"])
            folder = os.path.join(PACKAGE, sample["path"])
            self.assertTrue(any(n.endswith(".cs") for n in os.listdir(folder)), folder)

    def test_assembly_definition_names_the_binding(self):
        asmdef = read_json("Gpt2.asmdef")
        self.assertEqual((asmdef["name"], asmdef["rootNamespace"]), ("Gpt2", "Gpt2"))
        self.assertFalse(asmdef["allowUnsafeCode"])  # the binding needs no unsafe code (IL2CPP, WebGL)

    def test_the_binding_versions_agree(self):
        with open(os.path.join(PACKAGE, "Gpt2Native.cs"), encoding="utf-8") as f:
            native = f.read()
        version = ".".join(re.search(r"GPT2_VERSION_%s = (\d+);" % part, native).group(1) for part in ("MAJOR", "MINOR", "PATCH"))
        self.assertEqual(version, read_json("package.json")["version"])

    def test_npc_sample_compiles_against_the_unityengine_stub(self):
        mcs = shutil.which("mcs")
        if not mcs:
            self.skipTest("mcs is not installed (tools/install_deps.sh mono-mcs)")
        sources = [os.path.join(PACKAGE, "Gpt2Native.cs"), os.path.join(PACKAGE, "Gpt2.cs"),
                   os.path.join(PACKAGE, "Samples~", "Npc", "NpcSpeaker.cs"), os.path.join(ROOT, "tests", "shared", "UnityEngineStub.cs")]
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run([mcs, "-nologo", "-warnaserror+", "-target:library", "-out:" + os.path.join(tmp, "Npc.dll"), *sources],
                                 capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main()
