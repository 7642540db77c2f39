#!/usr/bin/env python3
"""Tests gen_nvml_unsupported.py on small made-up sources of each shape."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen_nvml_unsupported.py")


class GenNvmlUnsupportedTest(unittest.TestCase):
    def run_script(self, files):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for name, text in files.items():
                paths.append(os.path.join(d, name))
                with open(paths[-1], "w") as f:
                    f.write(text)
            implemented = paths.pop(list(files).index("exports.inc"))
            out = subprocess.run([sys.executable, SCRIPT, "--implemented", implemented] + paths,
                                 capture_output=True, text=True)
            return out

    def test_merges_every_shape_and_leaves_out_implemented_names_and_types(self):
        out = self.run_script({
            "exports.inc": "GS_NVML_EXPORT(nvmlInit_v2)\n",
            "header.h": ("#define nvmlInit nvmlInit_v2\n"
                         "#define nvmlOld_t nvmlNew_t\n"
                         "typedef struct nvmlFoo_st { int a; } nvmlFoo_t;\n"
                         "nvmlReturn_t DECLDIR nvmlInit_v2(void);\n"
                         "nvmlReturn_t DECLDIR nvmlDeviceGetFoo (nvmlDevice_t d, nvmlFoo_t *f);\n"
                         "#ifdef NVML_NO_UNVERSIONED_FUNC_DEFS\n"
                         "nvmlReturn_t DECLDIR nvmlInit(void);\n#endif\n"),
            "dispatch.h": "typedef struct {\n    nvmlReturn_t (*nvmlDeviceGetQux_v2)(int);\n} t;\n",
            "list.txt": "nvmlDeviceGetFoo\nnvmlUnitGetCount\n",
        })
        self.assertEqual(out.returncode, 0, out.stderr)
        body = [l for l in out.stdout.splitlines() if l.startswith("GS_NVML_UNSUPPORTED(")]
        self.assertEqual(body, [
            "GS_NVML_UNSUPPORTED(nvmlDeviceGetFoo)",
            "GS_NVML_UNSUPPORTED(nvmlDeviceGetQux_v2)",
            "GS_NVML_UNSUPPORTED(nvmlInit)",
            "GS_NVML_UNSUPPORTED(nvmlUnitGetCount)",
        ])
        self.assertIn("5 names in the sources, 1 implemented", out.stdout)

    def test_a_source_without_names_is_an_error(self):
        out = self.run_script({"exports.inc": "", "empty.h": "int main(void);\n"})
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("no NVML function names", out.stderr)


if __name__ == "__main__":
    unittest.main()
