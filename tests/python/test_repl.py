"""Drives the gpt2 program's REPL in a pseudo-terminal, as a person at a keyboard would.

Needs GPT2_BINARY_DIR (the build folder; CTest sets it). The model is the shipped
models/shakespeare_char_medium.gguf, else GPT2_TEST_OUT/shakespeare_char.gguf.
"""
import os
import pty
import re
import select
import signal
import sys
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY_DIR = os.environ.get("GPT2_BINARY_DIR", os.path.join(ROOT, "build"))
PROGRAM = os.path.join(BINARY_DIR, "examples", "gpt2")
ESCAPES = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]|\r")


def find_model():
    shipped = os.path.join(ROOT, "models", "shakespeare_char_medium.gguf")
    if os.path.exists(shipped):
        return shipped
    return os.path.join(os.environ.get("GPT2_TEST_OUT", ""), "shakespeare_char.gguf")


class Repl:
    """The program on a pseudo-terminal; `expect` reads until a pattern shows up or fails."""

    def __init__(self, *args):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the pty is its terminal
            os.environ["TERM"] = "xterm"
            try:
                os.execv(PROGRAM, [PROGRAM, *args])
            finally:
                os._exit(127)
        self.seen = b""  # everything read, escapes and \r removed
        self.pos = 0     # where the next expect starts looking

    def read_some(self, timeout):
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return b""
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # the child closed the terminal (EIO on Linux)
            data = b""
        if not data:
            raise EOFError("the program closed its terminal; output so far:\n" + self.seen.decode(errors="replace"))
        self.seen += ESCAPES.sub(b"", data)
        return data

    def expect(self, pattern, timeout=10):
        """Waits for `pattern` (a regex, bytes) after the last match; returns the text before it."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = regex.search(self.seen, self.pos)
            if m:
                before = self.seen[self.pos:m.start()]
                self.pos = m.end()
                return before
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {pattern!r}; output after the last match:\n"
                                     + self.seen[self.pos:].decode(errors="replace"))
            self.read_some(min(left, 0.5))

    def send(self, text):
        os.write(self.fd, text.encode() if isinstance(text, str) else text)

    def command(self, line, reply):
        """Types a line at the prompt and waits for the reply, then the next prompt."""
        self.expect(rb"> ")
        self.send(line + "\r")
        return self.expect(reply)

    def wait_exit(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.pid = 0
                return os.waitstatus_to_exitcode(status)
            try:
                self.read_some(0.1)
            except EOFError:
                pass
        raise AssertionError("the program did not exit")

    def close(self):
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


@unittest.skipUnless(sys.platform != "win32" and os.path.exists(PROGRAM), "needs the gpt2 program and a POSIX pty")
class ReplTest(unittest.TestCase):
    def setUp(self):
        self.repl = Repl("-m", find_model(), "-t", "1")
        self.addCleanup(self.repl.close)
        self.repl.expect(rb"/help for commands")

    def answer(self, prompt):
        """Types a prompt; returns the generated text (between the echoed prompt and the stats)."""
        text = self.repl.command(prompt, rb"\n\[\d+ tokens, [\d.]+ tokens/s, first token after \d+ ms[^\]]*\]\n")
        echoed = b"> " + prompt.encode() + b"\n" + prompt.encode()  # the edited line, then the text it starts
        self.assertIn(echoed, text)
        return text.split(echoed, 1)[1]

    def test_greedy_answers_after_reset_are_identical(self):
        self.repl.command("/n 40", rb"\(40 tokens per answer\)")
        self.repl.command("/temp 0", rb"\(temperature 0\)")
        first = self.answer("ROMEO:")
        self.repl.command("/reset", rb"\(conversation cleared\)")
        second = self.answer("ROMEO:")
        self.assertGreater(len(first), 20)
        self.assertEqual(first, second)

    def test_ctrl_c_stops_a_long_answer_and_the_prompt_returns(self):
        self.repl.command("/n 100000", rb"\(100000 tokens per answer\)")
        self.repl.expect(rb"> ")
        self.repl.send("ROMEO:\r")
        self.repl.expect(rb"ROMEO:\n")
        self.repl.expect(rb"[^\n]{20}")  # tokens stream in while the answer is still running
        self.repl.send(b"\x03")
        self.repl.expect(rb"stopped by Ctrl-C\]\n", timeout=10)
        self.repl.command("/n 5", rb"\(5 tokens per answer\)")  # the REPL still answers

    def test_ctrl_c_at_the_prompt_gives_a_hint(self):
        self.repl.expect(rb"> ")
        self.repl.send(b"half a line\x03")
        self.repl.expect(rb"\^C\n\(Ctrl-C stops an answer; /quit or Ctrl-D leaves\)\n")

    def test_bad_commands_and_values_are_explained(self):
        self.repl.command("/bogus", rb"unknown command '/bogus'; /help lists them\n")
        self.repl.command("/temp warm", rb"/temp expects a number >= 0")
        self.repl.command("/topk -1", rb"/topk expects an integer >= 0")
        self.repl.command("/n 0", rb"/n expects an integer from 1")
        self.repl.command("/seed x", rb"/seed expects an unsigned integer")

    def test_line_editing_and_history(self):
        self.repl.command("/n 3", rb"\(3 tokens per answer\)")
        self.repl.expect(rb"> ")
        self.repl.send("/bogus\x1b[D\x1b[D\x7fX\x1b[F\r")  # left, left, backspace 'g' -> "/boXus"
        self.repl.expect(rb"unknown command '/boXus'")
        self.repl.expect(rb"> ")
        self.repl.send("\x1b[A\r")  # up: the same line again
        self.repl.expect(rb"unknown command '/boXus'")

    def test_quit_exits_with_status_0(self):
        self.repl.command("/help", rb"/reset")
        self.repl.expect(rb"> ")
        self.repl.send("/quit\r")
        self.assertEqual(self.repl.wait_exit(), 0)


if __name__ == "__main__":
    unittest.main()
