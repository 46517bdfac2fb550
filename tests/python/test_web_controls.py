"""The web page's settings check (examples/web/controls.js), run under Node: a bad value in the
address (?temp=-1&run=1) or the form is named in a sentence and nothing starts (before, the page
did nothing and said nothing); an unknown key is named too. tools/web_test.sh checks the page itself
in Chromium shows the sentence."""
import json
import os
import shutil
import subprocess
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTROLS = os.path.join(ROOT, "examples", "web", "controls.js")
NODE = shutil.which("node") or shutil.which("nodejs")


@unittest.skipUnless(NODE, "needs Node")
class WebSettings(unittest.TestCase):
    def call(self, function, argument):
        """controls.js's `function` on `argument` (a query string for gpt2CheckQuery), as JSON."""
        script = (f"const c = require({json.dumps(CONTROLS)}); const a = {json.dumps(argument)};"
                  f"console.log(JSON.stringify(c.{function}(typeof a === 'string' ? new URLSearchParams(a) : a)))")
        p = subprocess.run([NODE, "-e", script], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def test_a_negative_temperature_in_the_address_is_named(self):
        self.assertEqual(self.call("gpt2CheckQuery", "temp=-1&run=1"),
                         ["temp=-1: temperature must be a number >= 0 (0 = always the most likely token)"])

    def test_the_documented_addresses_have_no_problems(self):
        for query in ["prompt=JULIET:&temp=0.8&topk=200&seed=7&n=200&run=1",  # README, web_test.sh
                      "prompt=ROMEO:&temp=0&topk=0&seed=0&n=1&run=0&model=x.gguf&grammar=root%20::=%20%22a%22",
                      "prompt=ROMEO:&choose=%20I%20will|%20Thou%20art&run=1&schema=%7B%22type%22:%22object%22%7D",
                      "prompt=ROMEO:&seed=7&n=200&run=1&thread=page"]:
            with self.subTest(query=query):
                self.assertEqual(self.call("gpt2CheckQuery", query), [])

    def test_each_bad_value_and_unknown_key_is_named(self):
        self.assertEqual(self.call("gpt2CheckQuery", "temperature=0.5&topk=1.5&seed=x&n=0&run=yes&thread=main&temp=nan&n=3000000000"), [
            "'temperature' is not a setting (prompt, temp, topk, seed, n, grammar, schema, choose, model, run, thread)",
            "topk=1.5: top-k must be an integer from 0 to 2147483647 (0 = all tokens)",
            "seed=x: seed must be an integer from 0 to 9007199254740991",
            "n=0: tokens must be an integer from 1 to 2147483647",
            "run=yes: run=1 starts at once, run=0 waits",
            "thread=main: thread=page writes on the page's own thread, thread=worker (the default) in a Web Worker",
            "temp=nan: temperature must be a number >= 0 (0 = always the most likely token)",
            "n=3000000000: tokens must be an integer from 1 to 2147483647",
        ])

    def test_the_form_values_are_checked_alike(self):
        self.assertEqual(self.call("gpt2CheckForm", {"temp": "0.8", "topk": "200", "seed": "1337", "n": "500"}), [])
        self.assertEqual(self.call("gpt2CheckForm", {"temp": "", "topk": "-3", "seed": "1337", "n": "500"}), [
            "'': temperature must be a number >= 0 (0 = always the most likely token)",
            "'-3': top-k must be an integer from 0 to 2147483647 (0 = all tokens)",
        ])


if __name__ == "__main__":
    unittest.main()
