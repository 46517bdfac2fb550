"""The npc example as a game developer reads its report: every character's answer parsed by the
game, the time until each line was ready, and the frames that missed the 60 Hz budget named
(before: a p99 over 14-16 frames, equal to the max, a 20 ms frame flagged nowhere, and the main
thread's per-frame work as the headline figure).

Needs GPT2_BINARY_DIR (the build folder; CTest sets it)."""
import os
import re
import subprocess
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = os.path.join(os.environ.get("GPT2_BINARY_DIR", os.path.join(ROOT, "build")), "examples", "npc")
CAST = ["ROMEO", "JULIET", "MERCUTIO", "NURSE", "BENVOLIO"]


@unittest.skipUnless(os.path.exists(PROGRAM), "needs the npc example")
class NpcReport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        run = subprocess.run([PROGRAM], capture_output=True, text=True, timeout=300)
        cls.status, cls.out, cls.err = run.returncode, run.stdout, run.stderr

    def test_it_ends_with_status_0_and_the_restored_character_says_the_same(self):
        self.assertEqual(self.status, 0, self.err)
        self.assertIn(": he says the same (", self.out)

    def test_every_answer_is_a_known_action_and_a_whole_sentence(self):
        answers = re.findall(r"([A-Z]+):\nACTION: (\w+)\n([^\n]*)\n\n\[the game: \1 ([^\]]*)\]", self.out)
        self.assertEqual([a[0] for a in answers], CAST + ["ROMEO"], self.out)
        for who, action, sentence, game in answers:
            with self.subTest(who=who):
                self.assertEqual(game, action)  # the game parsed the action
                self.assertRegex(sentence, r"^[A-Z].*[A-Za-z'-][.!?]$")  # ends after a whole word

    def test_each_line_says_when_it_was_ready(self):
        m = re.search(r"Lines ready \(whole, on the main thread\), from when each was asked for:\n (.*)\n", self.out)
        self.assertTrue(m, self.out)
        ready = re.findall(r" ([A-Z]+(?: again)?) (\d+) ms", m.group(1))
        self.assertEqual([who for who, _ in ready], CAST + ["ROMEO again"])
        self.assertTrue(all(int(ms) > 0 for _, ms in ready))

    def test_frames_report_late_frames_and_a_p99_only_with_enough_frames(self):
        m = re.search(r"(\d+) frames at 60 Hz while the characters wrote: median ([\d.]+) ms, max ([\d.]+) ms(.*)\n"
                      r"  late frames \(over the 16.7 ms budget by more than 1 ms\): (\d+) of (\d+)(?:, by ([\d., ]+)(, \.\.\.)? ms)?\n", self.out)
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


if __name__ == "__main__":
    unittest.main()
