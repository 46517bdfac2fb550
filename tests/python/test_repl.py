"""Drives the gpt2 program's REPL in a pseudo-terminal, as a person at a keyboard would.

Needs GPT2_BINARY_DIR (the build folder; CTest sets it). The model is the shipped
models/shakespeare_char_medium.gguf, else GPT2_TEST_OUT/shakespeare_char.gguf.
"""
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
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


class Screen:
    """What a terminal `width` columns wide shows, from the bytes written to it: printable ASCII
    with xterm's wrapping (a character written in the last column leaves the cursor there; the next
    one goes to the next row), CR, LF, and the escapes the line editor uses: cursor up/down/
    right/left (ESC [ n A/B/C/D), erase to the end of the row (ESC [ K) or of the screen (ESC [ J).
    Rows are not limited, so nothing scrolls away."""

    def __init__(self, width):
        self.width, self.rows, self.row, self.col, self.pending = width, [[]], 0, 0, False

    def feed(self, data):
        for m in re.finditer(rb"\x1b\[([0-9]*)([A-Za-z])|([\s\S])", data):
            if m.group(2):
                n, op = int(m.group(1) or 1), m.group(2)
                self.pending = False
                if op == b"A":
                    self.row = max(0, self.row - n)
                elif op == b"B":
                    self.row += n
                elif op == b"C":
                    self.col = min(self.width - 1, self.col + n)
                elif op == b"D":
                    self.col = max(0, self.col - n)
                elif op == b"K":
                    del self.line()[self.col:]
                elif op == b"J":
                    del self.line()[self.col:]
                    del self.rows[self.row + 1:]
                continue
            c = m.group(3)
            if c == b"\r":
                self.col, self.pending = 0, False
            elif c == b"\n":
                self.row, self.pending = self.row + 1, False
            elif c >= b" ":
                if self.pending:
                    self.row, self.col, self.pending = self.row + 1, 0, False
                line = self.line()
                line.extend(" " * (self.col + 1 - len(line)))
                line[self.col] = c.decode()
                if self.col == self.width - 1:
                    self.pending = True
                else:
                    self.col += 1

    def line(self):
        while len(self.rows) <= self.row:
            self.rows.append([])
        return self.rows[self.row]

    def text(self):
        return ["".join(r).rstrip() for r in self.rows]


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
        self.raw = b""   # everything read, as read
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
        self.raw += data
        return data

    def set_width(self, columns):
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))

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
            self.pid = 0
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


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

    def test_stop_ends_answers_before_the_stop_string_and_bare_stop_clears_it(self):
        self.repl.command("/n 40", rb"\(40 tokens per answer\)")
        self.repl.command("/temp 0", rb"\(temperature 0\)")
        free = self.answer("ROMEO:")
        start = next(i for i in range(5, len(free) - 3) if free[i:i + 3].isalpha())
        stop = free[start:start + 3]  # three letters from inside the greedy answer
        self.repl.command("/reset", rb"\(conversation cleared\)")
        self.repl.command("/stop " + stop.decode(), rb'\(answers stop at "' + re.escape(stop) + rb'"\)')
        text = self.repl.command("ROMEO:", rb"\n\[\d+ tokens, [\d.]+ tokens/s, first token after \d+ ms, stopped at a stop string\]\n")
        self.assertEqual(text.split(b"> ROMEO:\nROMEO:", 1)[1], free[:free.find(stop)])
        self.repl.command("/stop", rb"\(no stop strings\)")
        self.repl.command("/reset", rb"\(conversation cleared\)")
        self.assertEqual(self.answer("ROMEO:"), free)

    def test_undo_drops_the_last_answer_and_its_prompt(self):
        self.repl.command("/n 20", rb"\(20 tokens per answer\)")
        self.repl.command("/temp 0", rb"\(temperature 0\)")
        self.repl.command("/undo", rb"\(nothing to undo\)\n")
        first = self.answer("ROMEO:")
        second = self.answer("JULIET:")
        self.repl.command("/undo", rb"\(dropped the last answer and its prompt: 26 tokens in context\)\n")
        self.assertEqual(self.answer("JULIET:"), second)  # the same context again, so the same answer
        self.repl.command("/undo", rb"\(dropped the last answer and its prompt: 26 tokens in context\)\n")
        self.repl.command("/undo", rb"\(dropped the last answer and its prompt: 0 tokens in context\)\n")
        self.repl.command("/undo", rb"\(nothing to undo\)\n")
        self.assertEqual(self.answer("ROMEO:"), first)

    def test_undo_after_answers_that_overflowed_the_context_restores_the_turn_before(self):
        # The default /n 256 is twice the shipped model's context (128): each answer drops older
        # tokens. Undo restores the state saved before the turn (before: the count of the
        # turn's tokens exceeded the context, and undo emptied the conversation).
        self.repl.command("/temp 0", rb"\(temperature 0\)")
        self.repl.command("/n 20", rb"\(20 tokens per answer\)")
        self.answer("ROMEO:")
        self.repl.command("/n 256", rb"\(256 tokens per answer\)")
        long_first = self.answer("JULIET:")
        long_second = self.answer("NURSE:")
        self.repl.command("/undo", rb"\(dropped the last answer and its prompt: \d+ tokens in context\)\n")
        self.assertEqual(self.answer("NURSE:"), long_second)  # the same context again, so the same answer
        self.repl.command("/undo", rb"\(dropped the last answer and its prompt: \d+ tokens in context\)\n")
        self.repl.command("/undo", rb"\(dropped the last answer and its prompt: 26 tokens in context\)\n")
        self.assertEqual(self.answer("JULIET:"), long_first)
        self.repl.command("/undo", rb"\(dropped the last answer and its prompt: 26 tokens in context\)\n")
        self.repl.command("/undo", rb"\(dropped the last answer and its prompt: 0 tokens in context\)\n")
        self.repl.command("/undo", rb"\(nothing to undo\)\n")

    def test_undo_knows_the_sessions_context_when_ctx_is_smaller_than_the_models(self):
        # --ctx 64: a 26-token turn then a 40-token answer pass the session's 64, not the model's 128.
        self.repl.close()
        self.repl = Repl("-m", find_model(), "-t", "1", "--ctx", "64")
        self.addCleanup(self.repl.close)
        self.repl.expect(rb"context 64 of the model's 128;")
        self.repl.command("/temp 0", rb"\(temperature 0\)")
        self.repl.command("/n 20", rb"\(20 tokens per answer\)")
        self.answer("ROMEO:")
        self.repl.command("/n 40", rb"\(40 tokens per answer\)")
        first = self.answer("JULIET:")
        self.repl.command("/undo", rb"\(dropped the last answer and its prompt: 26 tokens in context\)\n")
        self.assertEqual(self.answer("JULIET:"), first)

    def test_load_restores_a_saved_conversation_and_a_failed_load_changes_nothing(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        saved, damaged = os.path.join(folder.name, "chat.state"), os.path.join(folder.name, "damaged.state")
        self.repl.command("/n 20", rb"\(20 tokens per answer\)")
        self.repl.command("/temp 0", rb"\(temperature 0\)")
        self.answer("ROMEO:")
        self.repl.command("/save " + saved, rb"\(saved 26 tokens to " + re.escape(saved.encode()) + rb"\)\n")
        after_save = self.answer("JULIET:")
        self.repl.command("/load " + saved, rb"\(loaded 26 tokens from " + re.escape(saved.encode()) + rb"\)\n")
        self.repl.command("/undo", rb"\(nothing to undo\)\n")  # the loaded conversation is the new start
        self.assertEqual(self.answer("JULIET:"), after_save)
        self.repl.command("/load " + saved, rb"\(loaded 26 tokens")
        with open(saved, "rb") as f:
            data = bytearray(f.read())
        data[len(data) // 2] ^= 0x10
        with open(damaged, "wb") as f:
            f.write(data)
        self.repl.command("/load " + damaged, re.escape(damaged.encode()) + rb": session state is damaged[^\n]*\(the conversation is unchanged\)\n")
        self.repl.command("/load " + os.path.join(folder.name, "missing"), rb"cannot open [^\n]*missing: No such file")
        self.repl.command("/load", rb"/load expects a file name")
        self.assertEqual(self.answer("JULIET:"), after_save)

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
        self.repl.command("/top-p 2", rb"/top-p expects a number from 0 to 1")
        self.repl.command("/repeat-last-n -2", rb"/repeat-last-n expects an integer >= -1")
        self.repl.command("/presence-penalty nan", rb"/presence-penalty expects a finite number")
        self.repl.command("/choose", rb"/choose expects options split at \|")
        self.repl.command("/choose a|b", rb"/choose: the session.s context is empty: evaluate a prompt first")

    def test_sampling_commands_give_the_text_of_the_cli_flags_of_the_same_names(self):
        for command, reply in (("/n 30", rb"\(30 tokens per answer\)"), ("/top-p 0.6", rb"\(top-p 0.6\)"), ("/min-p 0.05", rb"\(min-p 0.05\)"),
                               ("/repeat-penalty 1.3", rb"\(repeat-penalty 1.3\)"), ("/repeat-last-n 16", rb"\(repeat-last-n 16\)"),
                               ("/presence-penalty 0.2", rb"\(presence-penalty 0.2\)"), ("/frequency-penalty 0.1", rb"\(frequency-penalty 0.1\)")):
            self.repl.command(command, reply)
        text = self.answer("ROMEO:").decode()
        flags = ("--top-p", "0.6", "--min-p", "0.05", "--repeat-penalty", "1.3", "--repeat-last-n", "16",
                 "--presence-penalty", "0.2", "--frequency-penalty", "0.1")
        cli = subprocess.run([PROGRAM, "-m", find_model(), "-t", "1", "--json", "-p", "ROMEO:", "-n", "30", *flags], capture_output=True, timeout=120)
        self.assertEqual(cli.returncode, 0, cli.stderr.decode())
        self.assertEqual(text, json.loads(cli.stdout)["text"])
        plain = subprocess.run([PROGRAM, "-m", find_model(), "-t", "1", "--json", "-p", "ROMEO:", "-n", "30"], capture_output=True, timeout=120)
        self.assertNotEqual(text, json.loads(plain.stdout)["text"])  # the commands changed the chain

    def test_choose_scores_options_after_the_conversation_as_the_cli_does_and_changes_nothing(self):
        self.repl.command("/n 12", rb"\(12 tokens per answer\)")
        self.repl.command("/temp 0", rb"\(temperature 0\)")
        context = "ROMEO:" + self.answer("ROMEO:").decode()
        listed = self.repl.command("/choose  the| thou|\\n", rb"\(the likeliest: (\"[^\n]*\")\)\n")
        scores = [float(v) for v in re.findall(rb'^  "[^\n]*" (-?[\d.]+)$', listed, re.M)]
        cli = subprocess.run([PROGRAM, "-m", find_model(), "-t", "1", "--json", "-p", context, "--choose", " the| thou|\n"],
                             capture_output=True, timeout=120)
        self.assertEqual(cli.returncode, 0, cli.stderr.decode())
        expected = json.loads(cli.stdout)
        self.assertEqual(len(scores), 3)
        for got, want in zip(scores, expected["logprobs"]):
            self.assertAlmostEqual(got, want, delta=2e-4)
        self.assertIn(b'(the likeliest: "' + expected["choice"].replace("\n", "\\n").encode() + b'")', self.repl.seen)
        after = self.answer("")  # the conversation goes on as if /choose had not been asked
        self.repl.command("/reset", rb"\(conversation cleared\)")
        self.answer("ROMEO:")
        self.assertEqual(after, self.answer(""))

    def test_line_editing_and_history(self):
        self.repl.command("/n 3", rb"\(3 tokens per answer\)")
        self.repl.expect(rb"> ")
        self.repl.send("/bogus\x1b[D\x1b[D\x7fX\x1b[F\r")  # left, left, backspace 'g' -> "/boXus"
        self.repl.expect(rb"unknown command '/boXus'")
        self.repl.expect(rb"> ")
        self.repl.send("\x1b[A\r")  # up: the same line again
        self.repl.expect(rb"unknown command '/boXus'")

    def test_a_line_longer_than_the_terminal_is_redrawn_in_place(self):
        # A 60-column pane and a 100-character line typed a key at a time: the line takes two
        # rows, whatever is typed after it wraps (before: each key printed the line on a new row).
        self.repl.set_width(60)
        self.repl.command("/n 1", rb"\(1 tokens per answer\)")
        self.repl.expect(rb"> ")
        start = len(self.repl.raw)
        line = "/" + "".join(chr(ord("a") + i % 26) for i in range(99))
        for c in line:
            self.repl.send(c)
            self.repl.expect(re.escape(c.encode()))
        self.repl.send("\x1b[D" * 50 + "X")  # 50 left: the cursor goes back to the first row
        self.repl.send("\x7f\x7fY")          # backspace X, backspace line[49], type Y
        self.repl.send("\x1b[F\r")            # End, Enter
        self.repl.expect(rb"unknown command[^\n]*\n")
        self.repl.expect(rb"> ")
        screen = Screen(60)
        screen.feed(self.repl.raw)
        rows = screen.text()
        first = next(i for i, row in enumerate(rows) if row.startswith("> /abc"))
        edited = "> " + line[:49] + "Y" + line[50:]
        self.assertEqual(rows[first:first + 3], [edited[:60], edited[60:], ("unknown command '" + edited[2:])[:60]])

    def test_quit_exits_with_status_0(self):
        self.repl.command("/help", rb"/reset")
        self.repl.expect(rb"> ")
        self.repl.send("/quit\r")
        self.assertEqual(self.repl.wait_exit(), 0)


@unittest.skipUnless(os.path.exists(PROGRAM), "needs the gpt2 program")
class CliTest(unittest.TestCase):
    """The gpt2 program with a prompt: one generation, then exit."""

    def run_cli(self, *args):
        return subprocess.run([PROGRAM, "-m", find_model(), "-t", "1", *args], capture_output=True, timeout=120)

    def cli_json(self, *args):
        p = self.run_cli("--json", *args)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        return json.loads(p.stdout)

    def generate_json(self, *args):
        """40 greedy tokens after "ROMEO:" (a later -n wins)."""
        return self.cli_json("-p", "ROMEO:", "-n", "40", "--temp", "0", *args)

    def test_stop_cuts_the_text_before_the_first_stop_string_and_ends_generation(self):
        free = self.generate_json()
        text = free["text"]
        start = next(i for i in range(5, len(text) - 3) if text[i:i + 3].isalpha())
        stop = text[start:start + 3]
        stopped = self.generate_json("--stop", "never in the text", "--stop", stop)
        self.assertEqual(stopped["text"], text[:text.find(stop)])
        self.assertLess(len(stopped["ids"]), 40)  # the tokens up to the one that completed the stop string
        self.assertEqual(stopped["ids"], free["ids"][:len(stopped["ids"])])

    def test_load_state_without_a_prompt_continues_exactly_like_one_uninterrupted_run(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        state = os.path.join(folder.name, "a.state")
        first = self.generate_json("-n", "20", "--save-state", state)
        second = self.cli_json("--load-state", state, "-n", "20", "--temp", "0")
        whole = self.generate_json("-n", "40")
        self.assertEqual(second["prompt_ids"], [])
        self.assertEqual(first["ids"] + second["ids"], whole["ids"])
        self.assertEqual(first["text"] + second["text"], whole["text"])
        self.assertGreater(len(whole["text"]), 30)

    def test_n_0_only_evaluates_the_prompt_and_its_saved_state_continues_it(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        state = os.path.join(folder.name, "preamble.state")
        preamble = self.generate_json("-n", "0", "--save-state", state)
        whole = self.generate_json()
        self.assertEqual((preamble["ids"], preamble["text"]), ([], ""))
        self.assertEqual(preamble["last_logits"], whole["last_logits"])
        continued = self.cli_json("--load-state", state, "-n", "40", "--temp", "0")
        self.assertEqual(continued["last_logits"], whole["last_logits"])
        self.assertEqual(continued["ids"], whole["ids"])
        plain = self.run_cli("-p", "ROMEO:", "-n", "0")
        self.assertEqual((plain.returncode, plain.stdout), (0, b"ROMEO:\n"))

    def test_a_damaged_or_missing_state_file_is_refused_with_the_reason_and_status_1(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        state, damaged = os.path.join(folder.name, "a.state"), os.path.join(folder.name, "damaged.state")
        self.generate_json("-n", "5", "--save-state", state)
        with open(state, "rb") as f:
            data = bytearray(f.read())
        data[len(data) // 2] ^= 0x01
        with open(damaged, "wb") as f:
            f.write(data)
        for path, message in [(damaged, damaged + ": session state is damaged"),
                              (state + ".missing", "cannot open " + state + ".missing")]:
            with self.subTest(path=path):
                p = self.run_cli("--load-state", path, "-n", "5")
                self.assertEqual(p.returncode, 1)
                self.assertEqual(p.stdout, b"")
                self.assertTrue(p.stderr.decode().startswith("gpt2: " + message), p.stderr.decode())

    def test_bad_sampling_values_are_refused_with_a_message_and_status_1(self):
        for args, message in [
            (["--top-p", "1.5"], "--top-p expects a number from 0 to 1, got '1.5'"),
            (["--min-p", "-0.1"], "--min-p expects a number from 0 to 1, got '-0.1'"),
            (["--repeat-penalty", "nan"], "--repeat-penalty expects a finite number >= 0, got 'nan'"),
            (["--repeat-last-n", "-2"], "--repeat-last-n expects an integer >= -1, got '-2'"),
            (["--presence-penalty", "inf"], "--presence-penalty expects a finite number, got 'inf'"),
            (["--frequency-penalty", "x"], "--frequency-penalty expects a finite number, got 'x'"),
            (["--stop", ""], "--stop expects a string of at least one character"),
            (["--context-policy", "fast"], "--context-policy expects exact or discard, got 'fast'"),
            (["--keep", "4"], "--keep needs --context-policy discard"),
        ]:
            with self.subTest(args=args):
                p = self.run_cli("-p", "ROMEO:", *args)
                self.assertEqual(p.returncode, 1)
                self.assertEqual(p.stderr.decode(), "gpt2: " + message + "\n")


if __name__ == "__main__":
    unittest.main()
