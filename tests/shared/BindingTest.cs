// BindingTest.cs - the C# binding's wrapper (bindings/csharp/Gpt2.cs) against the shared library:
// each check names the behaviour, exercises one part of the marshalling (strings, arrays, the
// callbacks, errors, the batch calls, the abort callback) and compares with what the library does
// without C#, or with the same calls one session at a time.
//     mono BindingTest.exe MODEL.gguf
using System;
using System.Collections.Generic;
using Gpt2;

static class BindingTest
{
    static int failures;

    static void Check(string name, bool ok, string detail = "")
    {
        Console.WriteLine("{0} {1}{2}", ok ? "ok  " : "FAIL", name, ok || detail.Length == 0 ? "" : ": " + detail);
        if (!ok) failures++;
    }

    static bool Same<T>(T[] a, T[] b)
    {
        if (a == null || b == null || a.Length != b.Length) return false;
        for (int i = 0; i < a.Length; i++)
            if (!a[i].Equals(b[i])) return false;
        return true;
    }

    static Gpt2GenerateOptions Options(int n, ulong seed)
    {
        return new Gpt2GenerateOptions { MaxNewTokens = n, Seed = seed };
    }

    static int Main(string[] args)
    {
        string path = args[0];
        Gpt2Library.CheckAbi();
        Check("the library's version is the binding's", Gpt2Library.Version == Gpt2Native.GPT2_VERSION, Gpt2Library.VersionString);

        try
        {
            new Gpt2Model(path + ".missing").Dispose();
            Check("a missing file throws", false);
        }
        catch (Gpt2Exception e)
        {
            Check("a missing file throws Gpt2Exception with the library's message",
                  e.Code == gpt2_result.GPT2_ERROR_IO && e.Message.Contains(".missing"), e.Code + " " + e.Message);
        }

        var logged = new List<string>();
        using (var model = new Gpt2Model(path, (level, message) => logged.Add(message)))
        using (var session = new Gpt2Session(model))
        {
            Check("the log callback receives the load message", logged.Exists(m => m.StartsWith("loaded")), string.Join("|", logged));
            Check("model info comes through", model.Info.n_vocab == 65 && model.Info.n_ctx > 0,
                  "n_vocab " + model.Info.n_vocab + " n_ctx " + model.Info.n_ctx);
            int[] ids = model.Tokenize("ROMEO: thou art");
            Check("tokenize and detokenize round-trip", model.Detokenize(ids) == "ROMEO: thou art" && ids.Length == 15);

            string plain = session.Generate("ROMEO:", Options(60, 7));
            Check("the context holds prompt and tokens", session.Tokens.Length == 66, session.Tokens.Length.ToString());

            session.Reset();
            var pieces = new List<string>();
            string streamed = session.Generate("ROMEO:", Options(60, 7), (token, text) => { pieces.Add(text); return true; });
            Check("the same seed gives the same text; the streamed pieces make it", streamed == plain && string.Concat(pieces) == plain);

            session.Reset();
            int calls = 0;
            session.Generate("ROMEO:", Options(60, 7), (token, text) => ++calls < 5);
            Check("returning false stops generation", calls == 5 && session.Tokens.Length == 6 + 5, calls + " calls");

            // A stop string: the text up to it, never the string itself.
            int cut = plain.IndexOf('\n', 1);
            string stop = plain.Substring(cut, 2);
            session.Reset();
            string stopped = session.Generate("ROMEO:", new Gpt2GenerateOptions { MaxNewTokens = 60, Seed = 7, Stop = new[] { "zzz", stop } });
            Check("a stop string ends the text before it", stopped == plain.Substring(0, plain.IndexOf(stop)), "[" + stopped + "]");

            // Banning every character that greedy decoding picks, by logit_bias and by on_logits.
            session.Reset();
            string greedy = session.Generate("ROMEO:", new Gpt2GenerateOptions { MaxNewTokens = 30, Temperature = 0 });
            int banned = model.Tokenize(greedy.Substring(0, 1))[0];
            session.Reset();
            string biased = session.Generate("ROMEO:", new Gpt2GenerateOptions {
                MaxNewTokens = 30, Temperature = 0,
                LogitBias = new[] { new Gpt2Native.gpt2_logit_bias { token = banned, bias = float.NegativeInfinity } } });
            session.Reset();
            string hooked = session.Generate("ROMEO:", new Gpt2GenerateOptions {
                MaxNewTokens = 30, Temperature = 0, OnLogits = logits => logits[banned] = float.NegativeInfinity });
            string bannedText = greedy.Substring(0, 1);
            Check("logit_bias bans a token", !biased.Contains(bannedText) && biased.Length == 30, "[" + biased + "]");
            Check("on_logits edits the logits like logit_bias", hooked == biased, "[" + hooked + "]");

            // An exception in a callback stops generation and reaches the caller, not native code.
            session.Reset();
            try
            {
                session.Generate("ROMEO:", Options(60, 7), (token, text) => { throw new InvalidOperationException("from the callback"); });
                Check("an exception in on_token is rethrown", false);
            }
            catch (InvalidOperationException e)
            {
                Check("an exception in on_token is rethrown after generation stops",
                      e.Message == "from the callback" && session.Tokens.Length == 7, session.Tokens.Length.ToString());
            }

            // Save, generate, load: the same continuation again.
            session.Reset();
            session.Generate("ROMEO:", Options(20, 7));
            byte[] state = session.SaveState();
            string first = session.Generate("", Options(20, 8));
            session.LoadState(state);
            string again = session.Generate("", Options(20, 8));
            Check("a loaded state continues the same way", first == again && first.Length > 0);
            try
            {
                session.LoadState(new byte[] { 1, 2, 3 });
                Check("a damaged state throws", false);
            }
            catch (Gpt2Exception e)
            {
                Check("a damaged state throws Gpt2Exception", e.Code != gpt2_result.GPT2_OK, e.Message);
            }

            // Many sessions in one pass: each gets the logits and the text it gets alone.
            int[] romeo = model.Tokenize("ROMEO:"), juliet = model.Tokenize("JULIET: good night");
            using (var a = new Gpt2Session(model))
            using (var b = new Gpt2Session(model))
            {
                Gpt2Session.EvalBatch(new[] { a, b }, new[] { romeo, juliet });
                float[] batchedA = a.Logits, batchedB = b.Logits;
                a.Reset();
                b.Reset();
                a.Eval(romeo);
                b.Eval(juliet);
                Check("EvalBatch gives each session the logits Eval gives it alone", Same(batchedA, a.Logits) && Same(batchedB, b.Logits));

                a.Reset();
                b.Reset();
                string aloneA = a.Generate("ROMEO:", Options(40, 7)), aloneB = b.Generate("JULIET:", Options(40, 8));
                a.Reset();
                b.Reset();
                var piecesB = new List<string>();
                string[] texts = Gpt2Session.GenerateBatch(new[] { a, b }, new[] { "ROMEO:", "JULIET:" }, new[] { Options(40, 7), Options(40, 8) },
                                                           new Gpt2TokenHandler[] { null, (token, text) => { piecesB.Add(text); return true; } });
                Check("GenerateBatch gives each session the text Generate gives it alone, streamed to its own handler",
                      texts[0] == aloneA && texts[1] == aloneB && string.Concat(piecesB) == aloneB, "[" + texts[0] + "] [" + texts[1] + "]");
                try
                {
                    Gpt2Session.EvalBatch(new[] { a, a }, new[] { romeo, romeo });
                    Check("a session twice in a batch throws", false);
                }
                catch (Gpt2Exception e)
                {
                    Check("a session twice in a batch throws Gpt2Exception with the library's message",
                          e.Code == gpt2_result.GPT2_ERROR_INVALID_ARGUMENT && e.Message.Contains("same session"), e.Code + " " + e.Message);
                }
            }

            // ShouldAbort (abort_fn): polled between layers; a cancelled call throws and changes nothing.
            using (var s = new Gpt2Session(model))
            using (var other = new Gpt2Session(model))
            {
                s.Generate("ROMEO:", Options(10, 7));
                byte[] before = s.SaveState();
                int polls = 0;
                s.ShouldAbort = () => ++polls == 4;
                try
                {
                    s.Generate(" and JULIET", Options(50, 7));
                    Check("ShouldAbort cancels generation", false);
                }
                catch (Gpt2Exception e)
                {
                    Check("ShouldAbort cancels at the first true: GPT2_ERROR_ABORTED, the session as before the call",
                          e.Code == gpt2_result.GPT2_ERROR_ABORTED && polls == 4 && Same(s.SaveState(), before), e.Code + " after " + polls + " polls");
                }
                s.ShouldAbort = () => { throw new InvalidOperationException("from ShouldAbort"); };
                try
                {
                    s.Generate(" and JULIET", Options(50, 7));
                    Check("an exception in ShouldAbort is rethrown", false);
                }
                catch (InvalidOperationException e)
                {
                    Check("an exception in ShouldAbort cancels the call and is rethrown", e.Message == "from ShouldAbort" && Same(s.SaveState(), before));
                }
                s.ShouldAbort = () => true;
                try
                {
                    Gpt2Session.EvalBatch(new[] { s, other }, new[] { romeo, juliet });
                    Check("sessions[0]'s ShouldAbort cancels a batch", false);
                }
                catch (Gpt2Exception e)
                {
                    Check("sessions[0]'s ShouldAbort cancels a batch and leaves every session as it was",
                          e.Code == gpt2_result.GPT2_ERROR_ABORTED && Same(s.SaveState(), before) && other.Tokens.Length == 0, e.Code + " " + e.Message);
                }
                s.ShouldAbort = null;
                s.LoadState(before);
                string continued = s.Generate("", Options(20, 8));
                s.LoadState(before);
                Check("after the aborts the session continues as it would have", continued.Length > 0 && s.Generate("", Options(20, 8)) == continued);
            }
        }
        // Grammars: the text follows one; a malformed one throws with the library's message; a
        // grammar keeps its model's native memory alive.
        {
            var model = new Gpt2Model(path);
            var session = new Gpt2Session(model);
            var grammar = new Gpt2Grammar(model, "root ::= \"ACTION: \" (\"wave\" | \"flee\") \"\\n\" [a-z ]{1,20} \".\"");
            var options = Options(100, 3);
            options.Grammar = grammar;
            string answer = session.Generate("ROMEO:", options);
            Check("generated text is a whole sentence of the grammar", grammar.Match(answer) == gpt2_match.GPT2_MATCH_COMPLETE, "[" + answer + "]");
            Check("Match tells a prefix from a sentence and from neither",
                  grammar.Match("ACTION: wa") == gpt2_match.GPT2_MATCH_PREFIX && grammar.Match("ACTION: run") == gpt2_match.GPT2_MATCH_NONE);
            try
            {
                new Gpt2Grammar(model, "root ::= \"unclosed");
                Check("a malformed grammar throws", false);
            }
            catch (Gpt2Exception e)
            {
                Check("a malformed grammar throws Gpt2Exception naming the line and column",
                      e.Code == gpt2_result.GPT2_ERROR_BAD_GRAMMAR && e.Message.Contains("line 1, column 10"), e.Message);
            }
            session.Dispose();
            model.Dispose();
            Check("a grammar outlives its disposed model", grammar.Match("ACTION: flee\nhi.") == gpt2_match.GPT2_MATCH_COMPLETE);
            grammar.Dispose();
            grammar.Dispose(); // twice: nothing more
        }
        // Dispose orders (Unity does not order OnDestroy): a model disposed before its sessions
        // lives on for them and is freed with the last; a disposed object throws ObjectDisposedException.
        {
            var model = new Gpt2Model(path);
            var first = new Gpt2Session(model);
            var second = new Gpt2Session(model);
            string before = first.Generate("ROMEO:", Options(30, 7));
            first.Reset();
            model.Dispose();
            model.Dispose(); // twice: nothing more
            Check("a session outlives its disposed model and generates as before", first.Generate("ROMEO:", Options(30, 7)) == before);
            try
            {
                model.Tokenize("ROMEO:");
                Check("a disposed model throws ObjectDisposedException", false);
            }
            catch (ObjectDisposedException)
            {
                Check("a disposed model throws ObjectDisposedException", true);
            }
            try
            {
                new Gpt2Session(model);
                Check("no new session of a disposed model", false);
            }
            catch (ObjectDisposedException)
            {
                Check("no new session of a disposed model: ObjectDisposedException", true);
            }
            first.Dispose();
            Check("the second session still runs after the first is gone", second.Generate("ROMEO:", Options(30, 7)) == before);
            second.Dispose(); // the last: frees the model
            second.Dispose();
            try
            {
                second.Generate("ROMEO:", Options(5, 7));
                Check("a disposed session throws ObjectDisposedException", false);
            }
            catch (ObjectDisposedException)
            {
                Check("a disposed session throws ObjectDisposedException", true);
            }
        }
        Console.WriteLine(failures == 0 ? "passed" : failures + " FAILED");
        return failures == 0 ? 0 : 1;
    }
}
