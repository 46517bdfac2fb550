"""The npc example as a game developer reads its report: every character's answer parsed by the
game (its action one of the character's own, chosen with gpt2_choose), the time until each line
was ready, the frames that missed the 60 Hz budget named (before: a p99 over 14-16 frames, equal
to the max, a 20 ms frame flagged nowhere, and the main thread's per-frame work as the headline
figure), and the characters' states: JSON held by the example's schema where the vocabulary
writes JSON (a GPT-2 vocabulary: the llama.cpp-written test model), the reason where it cannot
(the shipped Shakespeare model).

Needs GPT2_BINARY_DIR (the build folder; CTest sets it)."""
import json
import os
import re
import subprocess
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = os.path.join(os.environ.get("GPT2_BINARY_DIR", os.path.join(ROOT, "build")), "examples", "npc")
CAST = ["ROMEO", "JULIET", "MERCUTIO", "NURSE", "BENVOLIO"]
ACTIONS = {"ROMEO": ["sigh", "bow", "draw"], "JULIET": ["wave", "blush", "flee"], "MERCUTIO": ["laugh", "draw", "mock"],
           "NURSE": ["fuss", "hurry"], "BENVOLIO": ["bow", "warn"]}
GPT2_VOCABULARY_MODEL = os.path.join(ROOT, "tests", "data", "hf", "llama_cpp.gguf")  # byte-level BPE, 512 tokens, n_ctx 64


def answers(out):
    return re.findall(r"([A-Z]+):\nACTION: (\w+)\n([^\n]*)\n\n\[the game: \1 ([^\]]*)\]", out)


@unittest.skipUnless(os.path.exists(PROGRAM), "needs the npc example")
class NpcReport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        run = subprocess.run([PROGRAM], capture_output=True, text=True, timeout=300)
        cls.status, cls.out, cls.err = run.returncode, run.stdout, run.stderr

    def test_it_ends_with_status_0_and_the_restored_character_says_the_same(self):
        self.assertEqual(self.status, 0, self.err)
        self.assertIn(": he says the same (", self.out)

    def test_every_answer_is_one_of_its_actions_and_a_whole_sentence(self):
        found = answers(self.out)
        self.assertEqual([a[0] for a in found], CAST + ["ROMEO"], self.out)
        for who, action, sentence, game in found:
            with self.subTest(who=who):
                self.assertIn(action, ACTIONS[who])
                self.assertEqual(game, action)  # the game parsed the action
                self.assertRegex(sentence, r"^[A-Z].*[A-Za-z'-][.!?]$")  # ends after a whole word

    def test_a_vocabulary_without_json_says_why_there_are_no_states(self):
        self.assertIn("No states: json schema: this model's vocabulary cannot write any text the json schema accepts: no token holds '{'", self.out)

    def test_each_line_says_when_it_was_ready(self):
        m = re.search(r"Lines ready \(whole, on the main thread\), from when each was asked for:\n (.*)\n", self.out)
        self.assertTrue(m, self.out)
        ready = re.findall(r" ([A-Z]+(?: again)?) (\d+) ms", m.group(1))
        self.assertEqual([who for who, _ in ready], CAST + ["ROMEO again"])
        self.assertTrue(all(int(ms) > 0 for _, ms in ready))

    def test_frames_report_late_frames_and_a_p99_only_with_enough_frames(self):
        m = re.search(r"(\d+) frames at 60 Hz while the characters wrote: median ([\d.]+) ms, max ([\d.]+) ms(.*)\n"
                      r"  late frames \(over the 16.7 ms budget by more than 1 ms\): (\d+) of (\d+)(?:, by (\d+\.\d\d(?:, \d+\.\d\d)*)(, \.\.\.)? ms)?\n", self.out)
        self.assertTrue(m, self.out)
        frames, max_ms, tail, late, of = int(m.group(1)), float(m.group(3)), m.group(4), int(m.group(5)), int(m.group(6))
        self.assertEqual(of, frames)
        if frames < 100:
            self.assertEqual(tail, " (too few frames for a p99)")
        else:
            self.assertRegex(tail, r"^, p99 [\d.]+ ms$")
        by = [float(v) for v in m.group(7).split(", ")] if m.group(7) else []
        self.assertEqual(len(by), min(late, 5))
        self.assertTrue(all(v > 1 for v in by))
        self.assertEqual(late > 0, max_ms > 1000 / 60 + 1)  # the worst frame is late exactly when one is listed
        if by:
            self.assertAlmostEqual(by[0], max_ms - 1000 / 60, delta=0.011)


@unittest.skipUnless(os.path.exists(PROGRAM), "needs the npc example")
class NpcStatesWithGpt2Vocabulary(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        run = subprocess.run([PROGRAM, GPT2_VOCABULARY_MODEL], capture_output=True, text=True, timeout=300)
        cls.status, cls.out, cls.err = run.returncode, run.stdout, run.stderr

    def test_it_ends_with_status_0_and_the_answers_parse(self):
        self.assertEqual(self.status, 0, self.err)
        self.assertEqual([a[0] for a in answers(self.out)], CAST + ["ROMEO"], self.out)
        for who, action, _, game in answers(self.out):
            self.assertIn(action, ACTIONS[who])
            self.assertEqual(game, action)

    def test_every_state_is_json_the_schema_holds_and_the_game_read_it(self):
        self.assertIn("The characters' states, JSON the schema holds, read by the game:\n", self.out)
        states = re.findall(r"^  ([A-Z]+) (.*) \[the game: mood (\w+), trust (\d+)\]$", self.out, re.M)
        self.assertEqual([s[0] for s in states], CAST, self.out)
        for who, text, mood, trust in states:
            with self.subTest(who=who):
                state = json.loads(text)
                self.assertEqual(text, json.dumps(state, separators=(",", ":")))  # compact, mood then trust
                self.assertEqual(list(state), ["mood", "trust"])
                self.assertIn(state["mood"], ["calm", "merry", "angry", "afraid"])
                self.assertIsInstance(state["trust"], int)
                self.assertTrue(0 <= state["trust"] <= 10)
                self.assertEqual((mood, int(trust)), (state["mood"], state["trust"]))


if __name__ == "__main__":
    unittest.main()
