// BindingTest.cs - the C# binding's wrapper (bindings/csharp/Gpt2.cs) against the shared library:
// each check names the behaviour, exercises one part of the marshalling (strings, arrays, the
// callbacks, errors, the batch calls, the abort callback) and compares with what the library does
// without C#, or with the same calls one session at a time; then what a Unity game does
// (GenerateAsync, a token queue drained on the main thread, cancellation, a model from bytes, a
// missing native library).
//     mono BindingTest.exe MODEL.gguf
//     mono BindingTest.exe --without-library   (run by the test itself, without the library's folder)
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
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
        if (args[0] == "--without-library") return WithoutLibrary();
        string path = args[0];
        MissingLibrary();
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
                  e.Code == Gpt2Result.Io && e.Message.Contains(".missing"), e.Code + " " + e.Message);
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
            session.Eval("ROMEO:");
            Check("Eval(text) puts text in the context without generating; Generate then continues as from the prompt",
                  session.Tokens.Length == 6 && session.Generate("", Options(60, 7)) == plain, session.Tokens.Length.ToString());
            session.Reset();
            Check("MaxNewTokens = 0 evaluates the prompt only", session.Generate("ROMEO:", Options(0, 7)) == "" && session.Tokens.Length == 6);
            try
            {
                session.Eval("");
                Check("Eval(\"\") throws", false);
            }
            catch (Gpt2Exception e)
            {
                Check("Eval(\"\") throws Gpt2Exception: nothing to evaluate", e.Code == Gpt2Result.InvalidArgument && e.Message.Contains("empty"), e.Message);
            }

            session.Reset();
            var pieces = new List<string>();
            string streamed = session.Generate("ROMEO:", Options(60, 7), (token, text) => { pieces.Add(text); return true; });
            Check("the same seed gives the same text; the streamed pieces make it", streamed == plain && string.Concat(pieces) == plain);

            session.Reset();
            int calls = 0;
            session.Generate("ROMEO:", Options(60, 7), (token, text) => ++calls < 5);
            Check("returning false stops generation", calls == 5 && session.Tokens.Length == 6 + 5, calls + " calls");
            Check("LastEnd says onToken stopped it", session.LastEnd == Gpt2End.Callback && session.LastComplete, session.LastEnd.ToString());

            // A stop string: the text up to it, never the string itself.
            int cut = plain.IndexOf('\n', 1);
            string stop = plain.Substring(cut, 2);
            session.Reset();
            string stopped = session.Generate("ROMEO:", new Gpt2GenerateOptions { MaxNewTokens = 60, Seed = 7, Stop = new[] { "zzz", stop } });
            Check("a stop string ends the text before it", stopped == plain.Substring(0, plain.IndexOf(stop)), "[" + stopped + "]");
            Check("LastEnd says a stop string ended it", session.LastEnd == Gpt2End.Stop, session.LastEnd.ToString());
            session.Reset();
            session.Generate("ROMEO:", Options(20, 7));
            Check("LastEnd says MaxNewTokens ended it", session.LastEnd == Gpt2End.MaxTokens && session.LastComplete, session.LastEnd.ToString());

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
                Check("a damaged state throws Gpt2Exception with Gpt2Result.BadState", e.Code == Gpt2Result.BadState, e.Code + ": " + e.Message);
            }

            // Choices: each option's log-probability after the context; the session unchanged.
            session.Reset();
            session.Generate("ROMEO:", Options(10, 7));
            byte[] beforeChoose = session.SaveState();
            float[] lastLogits = session.Logits;
            string[] options = { " the", " thou", " the", "!" };
            Gpt2Choice choice = session.Choose(options);
            double top = lastLogits.Max(), logZ = top + Math.Log(lastLogits.Sum(x => Math.Exp(x - top)));
            int bang = model.Tokenize("!")[0];
            int argmax = 0;
            for (int i = 1; i < options.Length; i++)
                if (choice.Logprobs[i] > choice.Logprobs[argmax]) argmax = i;
            Check("Choose gives every option's logprob and the most likely, the session unchanged",
                  choice.Logprobs.Length == 4 && choice.Logprobs[0] == choice.Logprobs[2] && choice.Logprobs.All(x => x < 0) &&
                  Math.Abs(choice.Logprobs[3] - (lastLogits[bang] - logZ)) < 1e-4 && choice.Best == argmax && choice.Choice == options[argmax] &&
                  Same(session.SaveState(), beforeChoose),
                  string.Join(",", choice.Logprobs) + " best " + choice.Best);
            Gpt2Choice later = session.ChooseAsync(options).Result;
            Check("ChooseAsync's task gives what Choose gives, the session unchanged",
                  later.Best == choice.Best && Same(later.Logprobs, choice.Logprobs) && Same(session.SaveState(), beforeChoose));
            var cancelled = new CancellationTokenSource();
            cancelled.Cancel();
            Check("ChooseAsync with a cancelled token ends Canceled, the session unchanged",
                  Canceled(session.ChooseAsync(options, cancelled.Token)) && Same(session.SaveState(), beforeChoose));
            try
            {
                session.Choose("a", "");
                Check("an empty option throws", false);
            }
            catch (Gpt2Exception e)
            {
                Check("an empty option throws Gpt2Exception naming it", e.Code == Gpt2Result.InvalidArgument && e.Message.Contains("options[1] is empty"), e.Message);
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
                          e.Code == Gpt2Result.InvalidArgument && e.Message.Contains("same session"), e.Code + " " + e.Message);
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
                          e.Code == Gpt2Result.Aborted && polls == 4 && Same(s.SaveState(), before), e.Code + " after " + polls + " polls");
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
                          e.Code == Gpt2Result.Aborted && Same(s.SaveState(), before) && other.Tokens.Length == 0, e.Code + " " + e.Message);
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
            Check("generated text is a whole sentence of the grammar", grammar.Match(answer) == Gpt2Match.Complete, "[" + answer + "]");
            Check("LastEnd says the grammar's sentence ended it, and it is complete", session.LastEnd == Gpt2End.Grammar && session.LastComplete,
                  session.LastEnd + " " + session.LastComplete);
            var cutOptions = Options(5, 3);
            cutOptions.Grammar = grammar;
            string cutAnswer = session.Generate("ROMEO:", cutOptions);
            Check("a grammar's answer cut by MaxNewTokens: LastEnd MaxTokens, LastComplete false",
                  session.LastEnd == Gpt2End.MaxTokens && !session.LastComplete && grammar.Match(cutAnswer) == Gpt2Match.Prefix, "[" + cutAnswer + "]");
            Check("Match tells a prefix from a sentence and from neither",
                  grammar.Match("ACTION: wa") == Gpt2Match.Prefix && grammar.Match("ACTION: run") == Gpt2Match.None);
            try
            {
                new Gpt2Grammar(model, "root ::= \"unclosed");
                Check("a malformed grammar throws", false);
            }
            catch (Gpt2Exception e)
            {
                Check("a malformed grammar throws Gpt2Exception naming the line and column",
                      e.Code == Gpt2Result.BadGrammar && e.Message.Contains("line 1, column 10"), e.Message);
            }
            // a JSON Schema: the shipped model's characters hold no quotes or braces, but true and false
            using (var boolean = Gpt2Grammar.FromJsonSchema(model, "{\"type\": \"boolean\"}", compact: true))
            {
                var jsonOptions = Options(20, 5);
                jsonOptions.Grammar = boolean;
                string value = session.Generate("ROMEO:", jsonOptions);
                Check("text generated under a JSON Schema is a value it accepts", value == "true" || value == "false", "[" + value + "]");
            }
            // integerFraction: "type": "integer" takes 3.0 as JSON Schema counts it (the model writes 3 and '.')
            using (var digits = Gpt2Grammar.FromJsonSchema(model, "{\"type\": \"integer\"}", compact: true))
            using (var fraction = Gpt2Grammar.FromJsonSchema(model, "{\"type\": \"integer\"}", compact: true, anyOrder: true, integerFraction: true))
                Check("integerFraction takes an integer written with a fraction of zeros",
                      fraction.Match("33.0") == Gpt2Match.Complete && digits.Match("33.0") == Gpt2Match.None && digits.Match("33") == Gpt2Match.Complete);
            try
            {
                Gpt2Grammar.FromJsonSchema(model, "{\"type\": \"array\", \"uniqueItems\": true}");
                Check("a schema with a keyword that is not enforced throws", false);
            }
            catch (Gpt2Exception e)
            {
                Check("a schema with a keyword that is not enforced throws naming its JSON pointer",
                      e.Code == Gpt2Result.BadGrammar && e.Message.Contains("/uniqueItems"), e.Message);
            }
            try
            {
                Gpt2Grammar.FromJsonSchema(model, "{\"type\": \"boolean\"}", maxWhitespace: -1);
                Check("a negative maxWhitespace throws", false);
            }
            catch (ArgumentOutOfRangeException e)
            {
                Check("a negative maxWhitespace throws ArgumentOutOfRangeException naming it", e.ParamName == "maxWhitespace", e.Message);
            }
            session.Dispose();
            model.Dispose();
            Check("a grammar outlives its disposed model", grammar.Match("ACTION: flee\nhi.") == Gpt2Match.Complete);
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
        Unity(path);
        Stage(path);
        DisposeDuringCalls(path);
        Console.WriteLine(failures == 0 ? "passed" : failures + " FAILED");
        return failures == 0 ? 0 : 1;
    }

    // The child half of MissingLibrary: prints what the binding says when it finds no library.
    static int WithoutLibrary()
    {
        try
        {
            Gpt2Library.CheckAbi();
            Console.WriteLine("the library loaded");
        }
        catch (DllNotFoundException e)
        {
            Console.WriteLine(e.Message);
        }
        return 0;
    }

    // This program again, under the same runtime, with LD_LIBRARY_PATH (where CTest put the
    // library's folder) emptied, then pointing at a folder whose libgpt2.so is no library: the
    // exception names the file and the folders looked in, and tells a file that failed to load.
    static void MissingLibrary()
    {
        string folder = Path.GetDirectoryName(typeof(BindingTest).Assembly.Location);
        string said = WithoutLibraryRun("");
        Check("a missing native library: DllNotFoundException naming the file, the folders looked in and LD_LIBRARY_PATH",
              said.Contains("native library " + Gpt2Library.FileName + " ") && said.Contains(folder) && said.Contains("LD_LIBRARY_PATH (unset)"), said);

        string bogus = Path.Combine(Path.GetTempPath(), "gpt2-binding-test-" + Process.GetCurrentProcess().Id);
        Directory.CreateDirectory(bogus);
        File.WriteAllText(Path.Combine(bogus, Gpt2Library.FileName), "not a library");
        said = WithoutLibraryRun(bogus);
        Directory.Delete(bogus, true);
        Check("a native library that does not load: the message names its path and says it did not load",
              said.Contains(Path.Combine(bogus, Gpt2Library.FileName) + " exists but did not load"), said);
    }

    static string WithoutLibraryRun(string libraryPath)
    {
        var start = new ProcessStartInfo(Process.GetCurrentProcess().MainModule.FileName,
                                         "\"" + typeof(BindingTest).Assembly.Location + "\" --without-library");
        start.UseShellExecute = false;
        start.RedirectStandardOutput = true;
        start.EnvironmentVariables["LD_LIBRARY_PATH"] = libraryPath;
        using (Process child = Process.Start(start))
        {
            string said = child.StandardOutput.ReadToEnd().Trim();
            child.WaitForExit();
            return said;
        }
    }

    // What a game does: generate on a worker thread, show the text on the main thread, cancel when
    // the player leaves; load the model from bytes; set the session up with a C# class.
    static void Unity(string path)
    {
        using (var model = new Gpt2Model(path))
        using (var session = new Gpt2Session(model))
        {
            string sync = session.Generate("ROMEO:", Options(60, 7));

            session.Reset();
            var queue = new Gpt2TokenQueue();
            Task<string> task = session.GenerateAsync("ROMEO:", Options(60, 7), queue);
            var shown = new StringBuilder(); // what Update shows, frame by frame
            int pieces = 0;
            string piece;
            while (!task.IsCompleted || queue.Count > 0)
            {
                while (queue.TryDequeue(out piece))
                {
                    shown.Append(piece);
                    pieces++;
                }
                Thread.Sleep(1);
            }
            Check("GenerateAsync's result is Generate's text for the same seed", task.Result == sync, "[" + task.Result + "]");
            Check("the token queue delivers every piece, in order: together they are the text",
                  shown.ToString() == sync && pieces == 60, pieces + " pieces: [" + shown + "]");

            // Busy: while the task's generation runs (held at its 5th token), the session refuses another call.
            session.Reset();
            var held = new ManualResetEventSlim();
            var resume = new ManualResetEventSlim();
            int steps = 0;
            Gpt2GenerateOptions holding = Options(60, 7);
            holding.OnLogits = logits => {
                if (++steps == 5)
                {
                    held.Set();
                    resume.Wait();
                }
            };
            task = session.GenerateAsync("ROMEO:", holding);
            held.Wait();
            try
            {
                session.Generate("ROMEO:", Options(5, 7));
                Check("a call during GenerateAsync throws Busy", false);
            }
            catch (Gpt2Exception e)
            {
                Check("a call during GenerateAsync throws Gpt2Exception with Gpt2Result.Busy", e.Code == Gpt2Result.Busy, e.Code + " " + e.Message);
            }
            resume.Set();
            Check("the held GenerateAsync then finishes with Generate's text", task.Result == sync, "[" + task.Result + "]");

            // Cancelled before it starts: the task is Canceled and the session untouched.
            byte[] before = session.SaveState();
            string next = session.Generate(" and", Options(40, 8));
            session.LoadState(before);
            var cancelled = new CancellationTokenSource();
            cancelled.Cancel();
            task = session.GenerateAsync(" and", Options(40, 8), null, cancelled.Token);
            Check("GenerateAsync with a cancelled token: the task is Canceled, the session as before",
                  Canceled(task) && Same(session.SaveState(), before), task.Status.ToString());

            // Cancelled while it runs (at its 10th token): Canceled, the session as before the call
            // (the abort's promise), the pieces given so far stay given, and the session goes on as if
            // the call had never been made.
            var leaving = new CancellationTokenSource();
            queue.Clear();
            held.Reset();
            resume.Reset();
            steps = 0;
            Gpt2GenerateOptions cancelledAt10 = Options(40, 8);
            cancelledAt10.OnLogits = logits => {
                if (++steps == 10)
                {
                    held.Set();
                    resume.Wait();
                }
            };
            task = session.GenerateAsync(" and", cancelledAt10, queue, leaving.Token);
            held.Wait();
            leaving.Cancel();
            resume.Set();
            Check("GenerateAsync cancelled while running: Canceled, the session as before the call",
                  Canceled(task) && Same(session.SaveState(), before), task.Status + ", " + session.Tokens.Length + " tokens");
            string given = queue.DequeueAll();
            // the 10th token's too: cancellation is polled in the passes, and the 10th was drawn after its pass
            Check("the pieces given before the cancellation were given", given == next.Substring(0, 10), "[" + given + "] of [" + next + "]");
            Check("after a cancellation the session generates as if the call had never been made", session.Generate(" and", Options(40, 8)) == next);

            // Side by side: onToken returning false keeps the text; a cancelled token rolls back.
            session.LoadState(before);
            int atBefore = session.Tokens.Length, andTokens = model.Tokenize(" and").Length;
            var stopNow = new CancellationTokenSource();
            string kept = session.Generate(" and", Options(40, 8), (token, text) => false);
            Check("onToken returning false: the call returns the text so far and the session keeps it",
                  kept == next.Substring(0, 1) && session.Tokens.Length == atBefore + andTokens + 1, session.Tokens.Length + " tokens");
            session.LoadState(before);
            try
            {
                session.Generate(" and", Options(40, 8), (token, text) => { stopNow.Cancel(); return true; }, stopNow.Token);
                Check("a token cancelled during Generate throws", false);
            }
            catch (OperationCanceledException e)
            {
                Check("a token cancelled during Generate: OperationCanceledException, the session as before",
                      e.CancellationToken == stopNow.Token && Same(session.SaveState(), before));
            }

            try
            {
                session.Generate("ROMEO:", new Gpt2GenerateOptions { Temperature = float.NaN });
                Check("Temperature = NaN throws", false);
            }
            catch (Gpt2Exception e)
            {
                Check("Temperature = float.NaN: the message says NaN", e.Code == Gpt2Result.InvalidArgument && e.Message.StartsWith("temperature is NaN;"), e.Message);
            }

            byte[] gguf = File.ReadAllBytes(path);
            using (var fromBytes = new Gpt2Model(gguf))
            {
                Array.Clear(gguf, 0, gguf.Length); // the model keeps its own copy
                using (var s = new Gpt2Session(fromBytes))
                    Check("a model from byte[] gives the text the file gives", s.Generate("ROMEO:", Options(60, 7)) == sync);
            }
            try
            {
                new Gpt2Model(new byte[] { 1, 2, 3, 4 }).Dispose();
                Check("bytes that are no GGUF file throw", false);
            }
            catch (Gpt2Exception e)
            {
                Check("bytes that are no GGUF file throw Gpt2Exception", e.Code == Gpt2Result.BadFile, e.Code + " " + e.Message);
            }

            var defaults = new Gpt2SessionOptions();
            Check("Gpt2SessionOptions starts from the library's defaults",
                  defaults.Threads == Gpt2Native.gpt2_session_default_params().n_threads && defaults.ContextPolicy == Gpt2ContextPolicy.Exact && defaults.ContextLength == 0);
            var options = new Gpt2SessionOptions { Threads = 1, ContextLength = 32, ContextPolicy = Gpt2ContextPolicy.Discard, KeepTokens = 6 };
            using (var small = new Gpt2Session(model, options))
            {
                string text = small.Generate("ROMEO:", Options(60, 7));
                int[] tokens = small.Tokens;
                Check("Gpt2SessionOptions reach the session: a 32-token context that keeps the prompt and discards the rest",
                      text.Length == 60 && tokens.Length <= 32 && model.Detokenize(new[] { tokens[0], tokens[1], tokens[2], tokens[3], tokens[4], tokens[5] }) == "ROMEO:",
                      tokens.Length + " tokens");
            }
        }
    }

    // Gpt2Stage stepped by the test, and GenerateAsync's lines on the model's own stage.
    static void Stage(string path)
    {
        using (var model = new Gpt2Model(path))
        {
            var sessions = new Gpt2Session[3];
            var alone = new Gpt2Session[3];
            string[] prompts = { "ROMEO:", "JULIET:", "" };
            for (int i = 0; i < 3; i++)
            {
                sessions[i] = new Gpt2Session(model, new Gpt2SessionOptions { Threads = 1 });
                alone[i] = new Gpt2Session(model, new Gpt2SessionOptions { Threads = 1 });
            }
            foreach (Gpt2Session s in new[] { sessions[2], alone[2] }) s.Eval("KING:");
            var expected = new string[3];
            for (int i = 0; i < 3; i++) expected[i] = alone[i].Generate(prompts[i], Options(12 + 4 * i, (ulong)(5 + i)));

            // Lines joining at different steps, stepped whole and under a 1 ms budget: each gets its text alone.
            foreach (long budget in new long[] { 0, 1000 })
            {
                using (var stage = new Gpt2Stage(model, 1))
                {
                    var saved = new byte[3][];
                    for (int i = 0; i < 3; i++) saved[i] = sessions[i].SaveState();
                    var tasks = new Task<string>[3];
                    var queues = new Gpt2TokenQueue[3];
                    int steps = 0;
                    for (int i = 0; i < 3; i++)
                    {
                        queues[i] = new Gpt2TokenQueue();
                        tasks[i] = stage.Add(sessions[i], prompts[i], Options(12 + 4 * i, (ulong)(5 + i)), queues[i]);
                        for (int k = 0; k < 3; k++, steps++) stage.Step(budget);
                    }
                    bool busy = false;
                    try
                    {
                        sessions[2].Generate("X", Options(2, 1));
                    }
                    catch (Gpt2Exception e)
                    {
                        busy = e.Code == Gpt2Result.Busy;
                    }
                    Check("a session with a line on a stage is busy (budget " + budget + ")", busy);
                    while (stage.Step(budget) > 0 && steps++ < 10000) { }
                    bool same = true;
                    string detail = "";
                    for (int i = 0; i < 3; i++)
                    {
                        same &= tasks[i].Status == TaskStatus.RanToCompletion && tasks[i].Result == expected[i] && queues[i].DequeueAll() == expected[i];
                        detail += "[" + (tasks[i].Status == TaskStatus.RanToCompletion ? tasks[i].Result : tasks[i].Status.ToString()) + "] vs [" + expected[i] + "] ";
                    }
                    Check("lines added at different steps of a Gpt2Stage end with the text Generate gives each alone (budget " + budget + " us)", same, detail);
                    Check("a staged line's end is its session's LastEnd", sessions[0].LastEnd == Gpt2End.MaxTokens);
                    for (int i = 0; i < 3; i++) sessions[i].LoadState(saved[i]);
                }
            }

            // Cancel, a cancelled token, a refused line, a disposed stage.
            using (var stage = new Gpt2Stage(model, 1))
            {
                byte[] before = sessions[0].SaveState();
                Task<string> cancelled = stage.Add(sessions[0], " and", Options(40, 3));
                var leaving = new CancellationTokenSource();
                Task<string> tokenCancelled = stage.Add(sessions[1], " and", Options(40, 3), null, leaving.Token);
                for (int k = 0; k < 4; k++) stage.Step();
                stage.Cancel(sessions[0]);
                leaving.Cancel();
                Check("Cancel(session) ends its line at once: Canceled, the session as before it", Canceled(cancelled) && Same(sessions[0].SaveState(), before));
                Check("a cancelled token ends its line: Canceled", Canceled(tokenCancelled) && stage.Active == 0, tokenCancelled.Status.ToString());
                Task<string> refused = stage.Add(sessions[0], " and", Options(5, 3));
                Task<string> twice = stage.Add(sessions[0], " and", Options(5, 3));
                string why = "";
                try
                {
                    twice.Wait();
                }
                catch (AggregateException e)
                {
                    why = e.InnerException.Message;
                }
                Check("a second line of one session on a stage ends its task with a Gpt2Exception saying so", why.Contains("already on this stage"), why);
                while (stage.Step() > 0) { }
                Check("the first line still ends with its text", refused.Status == TaskStatus.RanToCompletion);
                sessions[0].LoadState(before);
                Task<string> leftOn = stage.Add(sessions[0], " and", Options(40, 3));
                stage.Step();
                stage.Dispose();
                bool disposedStage = false;
                try
                {
                    leftOn.Wait();
                }
                catch (AggregateException e)
                {
                    disposedStage = e.InnerException is ObjectDisposedException && e.InnerException.Message.Contains("Gpt2Stage");
                }
                Check("disposing a stage ends its lines with ObjectDisposedException, the sessions as before them",
                      disposedStage && Same(sessions[0].SaveState(), before));
                bool refusedAfter = false;
                try
                {
                    stage.Step();
                }
                catch (ObjectDisposedException)
                {
                    refusedAfter = true;
                }
                Check("a disposed stage's Step throws ObjectDisposedException", refusedAfter);
                bool negative = false;
                using (var other = new Gpt2Stage(model))
                {
                    try
                    {
                        other.Step(-1);
                    }
                    catch (ArgumentOutOfRangeException)
                    {
                        negative = true;
                    }
                }
                Check("a negative budget throws ArgumentOutOfRangeException", negative);
            }

            // GenerateAsync's lines share the model's own stage: while one is held in its callback, the other waits too.
            for (int i = 0; i < 2; i++) sessions[i].Reset();
            var held = new ManualResetEventSlim();
            var resume = new ManualResetEventSlim();
            int picks = 0;
            Gpt2GenerateOptions holding = Options(20, 7);
            holding.OnLogits = logits => {
                if (++picks == 3)
                {
                    held.Set();
                    resume.Wait();
                }
            };
            var otherPieces = new Gpt2TokenQueue();
            Task<string> first = sessions[0].GenerateAsync("ROMEO:", holding);
            Task<string> second = sessions[1].GenerateAsync("JULIET:", Options(20, 8), otherPieces);
            held.Wait();
            int piecesWhileHeld = otherPieces.Count;
            Thread.Sleep(50);
            bool otherWaited = otherPieces.Count == piecesWhileHeld;
            resume.Set();
            Task.WaitAll(first, second);
            Check("two sessions' GenerateAsync lines run in one pass of the model's stage: holding one holds the other", otherWaited,
                  piecesWhileHeld + " -> " + otherPieces.Count);
            alone[0].Reset();
            alone[1].Reset();
            string firstAlone = alone[0].Generate("ROMEO:", Options(20, 7)), secondAlone = alone[1].Generate("JULIET:", Options(20, 8));
            Check("and each ends with the text its session gives alone", first.Result == firstAlone && second.Result == secondAlone,
                  "[" + first.Result + "] [" + second.Result + "]");
            foreach (Gpt2Session s in sessions) s.Dispose();
            foreach (Gpt2Session s in alone) s.Dispose();
        }
    }

    const string ActionGrammar = "root ::= \"ACTION: \" (\"wave\" | \"flee\") \"\\n\" [a-z ]{1,20} \".\"";

    // Runs call on a worker thread and holds it at its poll-th abort poll (between two layers of a
    // pass) while dispose runs on this thread, as Unity's OnDestroy runs while a task generates;
    // returns how the call ended: null when it returned, else its exception. False in reached: the
    // call ended before that poll.
    static Exception HeldAt(Gpt2Session session, int poll, Action call, Action dispose, out bool reached)
    {
        var atPoll = new ManualResetEventSlim();
        var go = new ManualResetEventSlim();
        int polls = 0;
        session.ShouldAbort = () => {
            if (++polls == poll)
            {
                atPoll.Set();
                go.Wait(10000);
            }
            return false;
        };
        Task worker = Task.Run(call);
        reached = WaitHandle.WaitAny(new[] { atPoll.WaitHandle, ((IAsyncResult)worker).AsyncWaitHandle }, 30000) == 0;
        if (reached) dispose();
        go.Set();
        try
        {
            worker.Wait();
            return null;
        }
        catch (AggregateException e)
        {
            return e.InnerException;
        }
    }

    // Every object disposed at every point of a running call, in every order that matters: the
    // call either finishes as it would have (what it holds stays alive until it ends) or throws
    // ObjectDisposedException (its session was disposed), and nothing crashes; what is left works.
    static void DisposeDuringCalls(string path)
    {
        string expected;
        using (var model = new Gpt2Model(path))
        using (var grammar = new Gpt2Grammar(model, ActionGrammar))
        using (var session = new Gpt2Session(model, new Gpt2SessionOptions { Threads = 1 }))
        {
            var options = Options(30, 3);
            options.Grammar = grammar;
            expected = session.Generate("ROMEO:", options);
        }
        string[] kinds = { "grammar", "model", "session", "model, grammar, session", "session, grammar, model" };
        int runs = 0, heldRuns = 0;
        bool grammarKept = true, modelKept = true, sessionStopped = true, afterwardsWorks = true;
        string detail = "";
        foreach (string kind in kinds)
        {
            for (int poll = 1; ; poll += poll < 8 ? 1 : 5)
            {
                var model = new Gpt2Model(path);
                var grammar = new Gpt2Grammar(model, ActionGrammar);
                var session = new Gpt2Session(model, new Gpt2SessionOptions { Threads = 1 });
                var options = Options(30, 3);
                options.Grammar = grammar;
                string text = null;
                bool reached;
                Exception ended = HeldAt(session, poll, () => { text = session.Generate("ROMEO:", options); }, () => {
                    foreach (string name in kind.Split(new[] { ", " }, StringSplitOptions.None))
                    {
                        if (name == "grammar") grammar.Dispose();
                        if (name == "model") model.Dispose();
                        if (name == "session") session.Dispose();
                    }
                }, out reached);
                runs++;
                if (!reached)
                {
                    session.Dispose();
                    grammar.Dispose();
                    model.Dispose();
                    break;
                }
                heldRuns++;
                if (kind.Contains("session"))
                {
                    if (!(ended is ObjectDisposedException))
                    {
                        sessionStopped = false;
                        detail += kind + " at poll " + poll + ": " + (ended == null ? "returned" : ended.GetType().Name) + "; ";
                    }
                }
                else
                {
                    bool same = ended == null && text == expected;
                    if (kind == "grammar") grammarKept &= same;
                    else modelKept &= same;
                    if (!same) detail += kind + " at poll " + poll + ": " + (ended == null ? "[" + text + "]" : ended.Message) + "; ";
                    try
                    {
                        grammar.Match("ACTION: wave");
                        if (kind == "grammar") afterwardsWorks = false;
                    }
                    catch (ObjectDisposedException)
                    {
                    }
                    // the session still runs, on a model disposed under it
                    if (kind == "model" && session.Generate("ROMEO:", Options(10, 3)).Length != 10) afterwardsWorks = false;
                }
                session.Dispose();
                grammar.Dispose();
                model.Dispose();
            }
        }
        Check("a grammar disposed during Generate stays alive until the call ends: the same text", grammarKept, detail);
        Check("a model disposed during Generate stays alive for its session: the same text", modelKept, detail);
        Check("a session disposed during Generate stops the call with ObjectDisposedException", sessionStopped, detail);
        Check("after a disposal during a call, the disposed objects throw and the others work", afterwardsWorks);
        Check("the disposals reached every layer of the prompt and of the tokens (" + heldRuns + " of " + runs + " runs held)", heldRuns > 5 * 20, heldRuns.ToString());

        // GenerateAsync: the task holds its session and grammar from the moment it is asked.
        bool asyncSafe = true;
        string asyncDetail = "";
        for (int i = 0; i < 20; i++)
        {
            var model = new Gpt2Model(path);
            var grammar = new Gpt2Grammar(model, ActionGrammar);
            var session = new Gpt2Session(model, new Gpt2SessionOptions { Threads = 1 });
            var options = Options(30, 3);
            options.Grammar = grammar;
            Task<string> task = session.GenerateAsync("ROMEO:", options);
            if (i % 2 == 0) Thread.Sleep(i); // before the task starts, or while it runs
            grammar.Dispose();
            if (i % 4 < 2) session.Dispose();
            model.Dispose();
            // A task that ended before its session was disposed has the whole text; one that was
            // still running when its session went throws ObjectDisposedException.
            bool sessionWent = i % 4 < 2;
            try
            {
                string text = task.Result;
                if (text != expected) { asyncSafe = false; asyncDetail += "run " + i + ": [" + text + "]; "; }
            }
            catch (AggregateException e)
            {
                if (!(sessionWent && e.InnerException is ObjectDisposedException))
                {
                    asyncSafe = false;
                    asyncDetail += "run " + i + ": " + e.InnerException.GetType().Name + " " + e.InnerException.Message + "; ";
                }
            }
            session.Dispose();
        }
        Check("GenerateAsync with its grammar, session and model disposed at once: the same text, or ObjectDisposedException when its session went", asyncSafe, asyncDetail);

        // The other calls that run passes: Choose, Eval, GenerateBatch.
        bool othersSafe = true;
        string othersDetail = "";
        for (int poll = 1; poll < 40; poll += 3)
        {
            var model = new Gpt2Model(path);
            var a = new Gpt2Session(model, new Gpt2SessionOptions { Threads = 1 });
            var b = new Gpt2Session(model, new Gpt2SessionOptions { Threads = 1 });
            var grammar = new Gpt2Grammar(model, ActionGrammar);
            bool reached;
            Exception chose = HeldAt(a, poll, () => a.Choose("wave", "flee", "fight"), () => a.Dispose(), out reached);
            if (reached && !(chose is ObjectDisposedException)) { othersSafe = false; othersDetail += "Choose " + chose + "; "; }
            a = new Gpt2Session(model, new Gpt2SessionOptions { Threads = 1 });
            Exception evaluated = HeldAt(a, poll, () => a.Eval(model.Tokenize("ROMEO: what light through yonder window breaks")), () => a.Dispose(), out reached);
            if (reached && !(evaluated is ObjectDisposedException)) { othersSafe = false; othersDetail += "Eval " + evaluated + "; "; }
            a = new Gpt2Session(model, new Gpt2SessionOptions { Threads = 1 });
            var options = Options(20, 3);
            options.Grammar = grammar;
            // sessions[0]'s ShouldAbort is the batch's: disposing the other session and the grammar
            // lets the batch finish; disposing sessions[0] stops it
            Exception batched = HeldAt(a, poll, () => Gpt2Session.GenerateBatch(new[] { a, b }, new[] { "ROMEO:", "JULIET:" }, new[] { options, options }),
                                       () => { b.Dispose(); grammar.Dispose(); }, out reached);
            if (reached && batched != null) { othersSafe = false; othersDetail += "GenerateBatch " + batched + "; "; }
            a.Dispose();
            b.Dispose();
            grammar.Dispose();
            model.Dispose();
        }
        Check("Choose, Eval and GenerateBatch with their objects disposed during them: ObjectDisposedException or done, never a crash", othersSafe, othersDetail);
    }

    static bool Canceled(Task task)
    {
        try
        {
            task.Wait();
        }
        catch (AggregateException)
        {
        }
        return task.IsCanceled;
    }
}
