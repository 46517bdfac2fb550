// Gpt2.cs - an idiomatic layer over Gpt2Native.cs: Gpt2Model and Gpt2Session own the native
// objects (IDisposable: dispose every session before its model), failures throw Gpt2Exception
// with the library's message, and generation streams text through a delegate.
//
// Callbacks work under IL2CPP (Unity's ahead-of-time compiler), which can only hand native code
// static methods marked [MonoPInvokeCallback]: the library calls one static method per callback
// kind, with `user` = a GCHandle of the object that holds the caller's delegate for that call.
// An exception thrown by the caller's delegate never crosses the native frames: it stops
// generation and is rethrown when the native call has returned.
using System;
using System.Collections.Generic;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Text;
using AOT;

#if !UNITY_5_3_OR_NEWER
namespace AOT
{
    /// <summary>Unity's marker for methods that native code calls (IL2CPP); outside Unity it does nothing.</summary>
    [AttributeUsage(AttributeTargets.Method)]
    public sealed class MonoPInvokeCallbackAttribute : Attribute
    {
        public MonoPInvokeCallbackAttribute(Type type) { }
    }
}
#endif

namespace Gpt2
{
    /// <summary>A gpt2.h function failed: Code is its result, Message the library's sentence.</summary>
    public class Gpt2Exception : Exception
    {
        public gpt2_result Code { get; private set; }

        public Gpt2Exception(gpt2_result code, string message) : base(message) { Code = code; }

        internal static void ThrowIfFailed(gpt2_result result, ref Gpt2Native.gpt2_error err)
        {
            if (result == gpt2_result.GPT2_OK) return;
            string message = err.Message;
            if (message.Length == 0) message = Gpt2Native.FromUtf8z(Gpt2Native.gpt2_result_string(result));
            throw new Gpt2Exception(result, message);
        }
    }

    /// <summary>Return false to stop generating.</summary>
    public delegate bool Gpt2TokenHandler(int token, string text);

    /// <summary>The library as a whole: its version, and the ABI check every constructor runs first.</summary>
    public static class Gpt2Library
    {
        static readonly object abiLock = new object();
        static bool abiChecked;

        public static int Version { get { return Gpt2Native.gpt2_version(); } }
        public static string VersionString { get { return Gpt2Native.FromUtf8z(Gpt2Native.gpt2_version_string()); } }

        /// <summary>Throws Gpt2Exception when the native library is of another version, or its structs
        /// are not the ones declared in Gpt2Native.cs; DllNotFoundException when there is none.</summary>
        public static void CheckAbi()
        {
            lock (abiLock)
            {
                if (abiChecked) return;
                Gpt2Native.gpt2_error err;
                gpt2_result result = Gpt2Native.gpt2_check_abi(Gpt2Native.GPT2_VERSION,
                    (UIntPtr)Marshal.SizeOf(typeof(Gpt2Native.gpt2_model_params)),
                    (UIntPtr)Marshal.SizeOf(typeof(Gpt2Native.gpt2_session_params)),
                    (UIntPtr)Marshal.SizeOf(typeof(Gpt2Native.gpt2_generate_params)),
                    (UIntPtr)Marshal.SizeOf(typeof(Gpt2Native.gpt2_model_info)), out err);
                Gpt2Exception.ThrowIfFailed(result, ref err);
                abiChecked = true;
            }
        }
    }

    /// <summary>Weights and vocabulary, immutable: share one between sessions and threads.</summary>
    public sealed class Gpt2Model : IDisposable
    {
        static readonly Gpt2Native.gpt2_log_fn LogThunk = OnLog;
        static readonly IntPtr LogThunkPointer = Marshal.GetFunctionPointerForDelegate(LogThunk);

        IntPtr handle;
        GCHandle logHandle;
        // The native model outlives this object's Dispose while sessions use it (Unity does not
        // order OnDestroy): it is freed with the last of them.
        readonly object gate = new object();
        int liveSessions;
        bool disposed;

        /// <summary>Loads a GGUF file. log (may be null) receives the library's messages, on the loading thread.</summary>
        public Gpt2Model(string path, Action<gpt2_log_level, string> log = null, bool noMmap = false)
        {
            if (path == null) throw new ArgumentNullException("path");
            Gpt2Library.CheckAbi();
            Gpt2Native.gpt2_model_params p = Gpt2Native.gpt2_model_default_params();
            p.no_mmap = noMmap ? 1 : 0;
            if (log != null)
            {
                logHandle = GCHandle.Alloc(log);
                p.log = LogThunkPointer;
                p.log_user = GCHandle.ToIntPtr(logHandle);
            }
            Gpt2Native.gpt2_error err;
            gpt2_result result = Gpt2Native.gpt2_model_load_file(Gpt2Native.Utf8z(path), ref p, out handle, out err);
            if (result != gpt2_result.GPT2_OK && logHandle.IsAllocated) logHandle.Free();
            Gpt2Exception.ThrowIfFailed(result, ref err);
        }

        public IntPtr Handle
        {
            get
            {
                if (disposed) throw new ObjectDisposedException("Gpt2Model");
                return handle;
            }
        }

        // A session's or a grammar's hold on the native model: taken when it is made, released when it is disposed.
        internal IntPtr Acquire()
        {
            lock (gate)
            {
                if (disposed) throw new ObjectDisposedException("Gpt2Model");
                liveSessions++;
                return handle;
            }
        }

        internal void Release()
        {
            lock (gate)
            {
                liveSessions--;
                if (disposed && liveSessions == 0) FreeNative();
            }
        }

        void FreeNative()
        {
            Gpt2Native.gpt2_model_free(handle);
            handle = IntPtr.Zero;
            if (logHandle.IsAllocated) logHandle.Free();
        }

        public Gpt2Native.gpt2_model_info Info { get { return Gpt2Native.gpt2_model_get_info(Handle); } }
        public string Name { get { return Gpt2Native.FromUtf8z(Info.name); } }

        public int[] Tokenize(string text, bool allowSpecial = false)
        {
            byte[] bytes = Encoding.UTF8.GetBytes(text);
            Gpt2Native.gpt2_error err;
            UIntPtr needed;
            gpt2_result result = Gpt2Native.gpt2_tokenize(Handle, bytes, (UIntPtr)bytes.Length, allowSpecial ? 1 : 0,
                                                          null, UIntPtr.Zero, out needed, out err);
            Gpt2Exception.ThrowIfFailed(result, ref err);
            int[] tokens = new int[(int)needed];
            result = Gpt2Native.gpt2_tokenize(Handle, bytes, (UIntPtr)bytes.Length, allowSpecial ? 1 : 0,
                                              tokens, (UIntPtr)tokens.Length, out needed, out err);
            Gpt2Exception.ThrowIfFailed(result, ref err);
            return tokens;
        }

        public string Detokenize(int[] tokens)
        {
            Gpt2Native.gpt2_error err;
            UIntPtr needed;
            gpt2_result result = Gpt2Native.gpt2_detokenize(Handle, tokens, (UIntPtr)tokens.Length, null, UIntPtr.Zero, out needed, out err);
            Gpt2Exception.ThrowIfFailed(result, ref err);
            byte[] text = new byte[(int)needed];
            result = Gpt2Native.gpt2_detokenize(Handle, tokens, (UIntPtr)tokens.Length, text, (UIntPtr)text.Length, out needed, out err);
            Gpt2Exception.ThrowIfFailed(result, ref err);
            return Encoding.UTF8.GetString(text);
        }

        /// <summary>Frees the model, or, while sessions of it live, lets the last of them free it: they
        /// keep working, and this object's own members throw ObjectDisposedException from now on.
        /// No finalizer: a forgotten model leaks rather than being freed under a session.</summary>
        public void Dispose()
        {
            lock (gate)
            {
                if (disposed) return;
                disposed = true;
                if (liveSessions == 0) FreeNative();
            }
        }

        [MonoPInvokeCallback(typeof(Gpt2Native.gpt2_log_fn))]
        static void OnLog(IntPtr user, gpt2_log_level level, IntPtr message)
        {
            try
            {
                ((Action<gpt2_log_level, string>)GCHandle.FromIntPtr(user).Target)(level, Gpt2Native.FromUtf8z(message));
            }
            catch (Exception)
            {
                // a logger that throws must not unwind through native code
            }
        }
    }

    /// <summary>What gpt2_generate_params holds, with the library's defaults (nanoGPT's: temperature
    /// 0.8, top_k 200, seed 1337). Zero turns each of the chain's other controls off.</summary>
    public sealed class Gpt2GenerateOptions
    {
        public int MaxNewTokens;
        public float Temperature;
        public int TopK;
        public ulong Seed;
        public float TopP;
        public float MinP;
        public float RepeatPenalty;
        public int RepeatLastN;
        public float PresencePenalty;
        public float FrequencyPenalty;
        public Gpt2Native.gpt2_logit_bias[] LogitBias;
        public string[] Stop;
        public bool StopAtEos;
        /// <summary>Edits a copy of the logits before top_k (see gpt2_logits_fn); costs two copies of n_vocab floats a token.</summary>
        public Action<float[]> OnLogits;
        /// <summary>The form the generated text must take (null = free text); see Gpt2Grammar.</summary>
        public Gpt2Grammar Grammar;

        public Gpt2GenerateOptions()
        {
            Gpt2Library.CheckAbi();
            Gpt2Native.gpt2_generate_params d = Gpt2Native.gpt2_generate_default_params();
            MaxNewTokens = d.max_new_tokens;
            Temperature = d.temperature;
            TopK = d.top_k;
            Seed = d.seed;
            TopP = d.top_p;
            MinP = d.min_p;
            RepeatPenalty = d.repeat_penalty;
            RepeatLastN = d.repeat_last_n;
            PresencePenalty = d.presence_penalty;
            FrequencyPenalty = d.frequency_penalty;
            StopAtEos = d.stop_at_eos != 0;
        }
    }

    /// <summary>A grammar in llama.cpp's GBNF (docs/GRAMMARS.md) for one model's vocabulary: set it as
    /// Gpt2GenerateOptions.Grammar and the generated text follows it. Immutable: share it between
    /// sessions and threads. It keeps its model's native memory alive until it is disposed.</summary>
    public sealed class Gpt2Grammar : IDisposable
    {
        IntPtr handle;
        readonly Gpt2Model model;

        /// <summary>Throws Gpt2Exception (GPT2_ERROR_BAD_GRAMMAR) naming the line, the column and what is wrong.</summary>
        public Gpt2Grammar(Gpt2Model model, string gbnf, string root = null)
        {
            if (model == null) throw new ArgumentNullException("model");
            if (gbnf == null) throw new ArgumentNullException("gbnf");
            IntPtr modelHandle = model.Acquire();
            Gpt2Native.gpt2_error err;
            gpt2_result result = Gpt2Native.gpt2_grammar_from_gbnf(modelHandle, Gpt2Native.Utf8z(gbnf), root == null ? null : Gpt2Native.Utf8z(root),
                                                                   out handle, out err);
            if (result != gpt2_result.GPT2_OK) model.Release();
            Gpt2Exception.ThrowIfFailed(result, ref err);
            this.model = model;
        }

        public IntPtr Handle
        {
            get
            {
                if (handle == IntPtr.Zero) throw new ObjectDisposedException("Gpt2Grammar");
                return handle;
            }
        }

        /// <summary>Whether text is a whole sentence of the grammar, the beginning of one, or neither.</summary>
        public gpt2_match Match(string text)
        {
            byte[] bytes = Encoding.UTF8.GetBytes(text ?? "");
            Gpt2Native.gpt2_error err;
            gpt2_match match;
            gpt2_result result = Gpt2Native.gpt2_grammar_match(Handle, bytes, (UIntPtr)bytes.Length, out match, out err);
            Gpt2Exception.ThrowIfFailed(result, ref err);
            return match;
        }

        public void Dispose()
        {
            if (handle == IntPtr.Zero) return;
            Gpt2Native.gpt2_grammar_free(handle);
            handle = IntPtr.Zero;
            model.Release();
        }
    }

    /// <summary>One conversation (KV cache, RNG, worker threads). One call at a time: a call while another
    /// thread's call runs throws Gpt2Exception with GPT2_ERROR_BUSY and changes nothing.</summary>
    public sealed class Gpt2Session : IDisposable
    {
        static readonly Gpt2Native.gpt2_token_fn TokenThunk = OnToken;
        static readonly IntPtr TokenThunkPointer = Marshal.GetFunctionPointerForDelegate(TokenThunk);
        static readonly Gpt2Native.gpt2_logits_fn LogitsThunk = OnLogits;
        static readonly IntPtr LogitsThunkPointer = Marshal.GetFunctionPointerForDelegate(LogitsThunk);
        static readonly Gpt2Native.gpt2_abort_fn AbortThunk = OnAbort;
        static readonly IntPtr AbortThunkPointer = Marshal.GetFunctionPointerForDelegate(AbortThunk);

        IntPtr handle;
        readonly Gpt2Model model; // its native model lives until this session is disposed
        readonly int nVocab;
        readonly AbortState abort = new AbortState();
        GCHandle abortHandle; // abort_user: the library polls OnAbort with it for the session's life

        public Gpt2Session(Gpt2Model model) : this(model, Gpt2Native.gpt2_session_default_params()) { }

        /// <summary>A session with the given params; set ShouldAbort instead of p.abort_fn.</summary>
        public Gpt2Session(Gpt2Model model, Gpt2Native.gpt2_session_params p)
        {
            if (model == null) throw new ArgumentNullException("model");
            if (p.abort_fn != IntPtr.Zero) throw new ArgumentException("set Gpt2Session.ShouldAbort instead of abort_fn");
            this.model = model;
            IntPtr modelHandle = model.Acquire();
            nVocab = Gpt2Native.gpt2_model_get_info(modelHandle).n_vocab;
            abortHandle = GCHandle.Alloc(abort);
            p.abort_fn = AbortThunkPointer;
            p.abort_user = GCHandle.ToIntPtr(abortHandle);
            Gpt2Native.gpt2_error err;
            gpt2_result result = Gpt2Native.gpt2_session_create(modelHandle, ref p, out handle, out err);
            if (result != gpt2_result.GPT2_OK)
            {
                abortHandle.Free();
                model.Release();
            }
            Gpt2Exception.ThrowIfFailed(result, ref err);
        }

        /// <summary>Polled between the layers of every pass, on the calling thread: return true to
        /// cancel the call in progress (a player left: stop the long prompt). The call then throws
        /// Gpt2Exception with GPT2_ERROR_ABORTED and the session is as it was before it. An exception
        /// thrown here cancels the call too and is rethrown from it. Null (the default): never.</summary>
        public Func<bool> ShouldAbort
        {
            get { return abort.ShouldAbort; }
            set { abort.ShouldAbort = value; }
        }

        public IntPtr Handle
        {
            get
            {
                if (handle == IntPtr.Zero) throw new ObjectDisposedException("Gpt2Session");
                return handle;
            }
        }

        public Gpt2Model Model { get { return model; } }

        /// <summary>The ids in context, oldest first.</summary>
        public int[] Tokens
        {
            get
            {
                int n = (int)Gpt2Native.gpt2_session_n_tokens(Handle);
                int[] tokens = new int[n];
                if (n > 0) Marshal.Copy(Gpt2Native.gpt2_session_tokens(Handle), tokens, 0, n);
                return tokens;
            }
        }

        public void Reset() { Gpt2Native.gpt2_session_reset(Handle); }

        public void Truncate(int nTokens)
        {
            Gpt2Native.gpt2_error err;
            gpt2_result result = Gpt2Native.gpt2_session_truncate(Handle, (UIntPtr)nTokens, out err);
            Gpt2Exception.ThrowIfFailed(result, ref err);
        }

        public byte[] SaveState()
        {
            Gpt2Native.gpt2_error err;
            UIntPtr needed;
            gpt2_result result = Gpt2Native.gpt2_session_save(Handle, null, UIntPtr.Zero, out needed, out err);
            Gpt2Exception.ThrowIfFailed(result, ref err);
            byte[] state = new byte[(int)needed];
            result = Gpt2Native.gpt2_session_save(Handle, state, (UIntPtr)state.Length, out needed, out err);
            Gpt2Exception.ThrowIfFailed(result, ref err);
            return state;
        }

        public void LoadState(byte[] state)
        {
            Gpt2Native.gpt2_error err;
            gpt2_result result = Gpt2Native.gpt2_session_load(Handle, state, (UIntPtr)state.Length, out err);
            Gpt2Exception.ThrowIfFailed(result, ref err);
        }

        /// <summary>Appends tokens to the context and runs the model over them (gpt2_session_eval);
        /// Logits then holds the prediction after the last one.</summary>
        public void Eval(int[] tokens)
        {
            if (tokens == null) throw new ArgumentNullException("tokens");
            Gpt2Native.gpt2_error err;
            gpt2_result result = Gpt2Native.gpt2_session_eval(Handle, tokens, (UIntPtr)tokens.Length, out err);
            abort.RethrowFailure();
            Gpt2Exception.ThrowIfFailed(result, ref err);
        }

        /// <summary>A copy of the n_vocab logits after the last evaluated token; null before any.</summary>
        public float[] Logits
        {
            get
            {
                IntPtr logits = Gpt2Native.gpt2_session_logits(Handle);
                if (logits == IntPtr.Zero) return null;
                float[] copy = new float[nVocab];
                Marshal.Copy(logits, copy, 0, copy.Length);
                return copy;
            }
        }

        /// <summary>Appends prompt to the context and generates (gpt2_generate_text). onToken (may be
        /// null) receives each token's text as soon as it is certain; returns all the generated text.</summary>
        public string Generate(string prompt, Gpt2GenerateOptions options = null, Gpt2TokenHandler onToken = null)
        {
            if (prompt == null) throw new ArgumentNullException("prompt");
            GenerateCall call;
            gpt2_result result;
            Gpt2Native.gpt2_error err;
            using (var p = new GenerateCallParams(options, onToken))
            {
                call = p.Call;
                result = Gpt2Native.gpt2_generate_text(Handle, Gpt2Native.Utf8z(prompt), ref p.Native, out err);
            }
            abort.RethrowFailure();
            if (call.Failure != null) call.Failure.Throw();
            Gpt2Exception.ThrowIfFailed(result, ref err);
            return call.Text.ToString();
        }

        /// <summary>Appends tokens[i] to sessions[i] for every i in one pass over the weights
        /// (gpt2_batch_eval): each session gets the logits it would get alone. The sessions share one
        /// model; sessions[0]'s threads run the pass and its ShouldAbort is polled (an aborted batch
        /// leaves every session as it was).</summary>
        public static void EvalBatch(Gpt2Session[] sessions, int[][] tokens)
        {
            if (sessions == null) throw new ArgumentNullException("sessions");
            if (tokens == null) throw new ArgumentNullException("tokens");
            if (tokens.Length != sessions.Length) throw new ArgumentException("one token array per session: " + tokens.Length + " for " + sessions.Length + " sessions");
            int n = sessions.Length;
            IntPtr[] handles = Handles(sessions);
            var pins = new GCHandle[n];
            var pointers = new IntPtr[n];
            var counts = new UIntPtr[n];
            gpt2_result result;
            Gpt2Native.gpt2_error err;
            try
            {
                for (int i = 0; i < n; i++)
                {
                    if (tokens[i] == null) throw new ArgumentNullException("tokens[" + i + "]");
                    pins[i] = GCHandle.Alloc(tokens[i], GCHandleType.Pinned);
                    pointers[i] = pins[i].AddrOfPinnedObject();
                    counts[i] = (UIntPtr)tokens[i].Length;
                }
                result = Gpt2Native.gpt2_batch_eval(handles, pointers, counts, (UIntPtr)n, out err);
            }
            finally
            {
                foreach (GCHandle pin in pins)
                    if (pin.IsAllocated) pin.Free();
            }
            if (n > 0) sessions[0].abort.RethrowFailure();
            Gpt2Exception.ThrowIfFailed(result, ref err);
        }

        /// <summary>Generates for every session at once (gpt2_generate_batch), one token per unfinished
        /// session per pass. prompts[i] (prompts or an entry may be null or "": continue the context),
        /// options[i] (null: the defaults) and onToken[i] (null: none) are those of Generate, and each
        /// session gets the text Generate would give it alone; returns the texts.</summary>
        public static string[] GenerateBatch(Gpt2Session[] sessions, string[] prompts, Gpt2GenerateOptions[] options = null,
                                             Gpt2TokenHandler[] onToken = null)
        {
            if (sessions == null) throw new ArgumentNullException("sessions");
            int n = sessions.Length;
            if (prompts != null && prompts.Length != n) throw new ArgumentException("one prompt per session: " + prompts.Length + " for " + n + " sessions");
            if (options != null && options.Length != n) throw new ArgumentException("one options per session: " + options.Length + " for " + n + " sessions");
            if (onToken != null && onToken.Length != n) throw new ArgumentException("one onToken per session: " + onToken.Length + " for " + n + " sessions");
            IntPtr[] handles = Handles(sessions);
            var calls = new GenerateCallParams[n];
            var nativeParams = new Gpt2Native.gpt2_generate_params[n];
            var promptPointers = new IntPtr[n];
            gpt2_result result;
            Gpt2Native.gpt2_error err;
            try
            {
                for (int i = 0; i < n; i++)
                {
                    calls[i] = new GenerateCallParams(options == null ? null : options[i], onToken == null ? null : onToken[i]);
                    nativeParams[i] = calls[i].Native;
                    if (prompts == null || prompts[i] == null) continue;
                    byte[] bytes = Gpt2Native.Utf8z(prompts[i]);
                    promptPointers[i] = Marshal.AllocHGlobal(bytes.Length);
                    Marshal.Copy(bytes, 0, promptPointers[i], bytes.Length);
                }
                result = Gpt2Native.gpt2_generate_batch(handles, promptPointers, nativeParams, (UIntPtr)n, out err);
            }
            finally
            {
                foreach (GenerateCallParams call in calls)
                    if (call != null) call.Dispose();
                foreach (IntPtr prompt in promptPointers)
                    if (prompt != IntPtr.Zero) Marshal.FreeHGlobal(prompt);
            }
            foreach (Gpt2Session session in sessions) session.abort.RethrowFailure();
            var texts = new string[n];
            for (int i = 0; i < n; i++)
            {
                if (calls[i].Call.Failure != null) calls[i].Call.Failure.Throw();
                texts[i] = calls[i].Call.Text.ToString();
            }
            Gpt2Exception.ThrowIfFailed(result, ref err);
            return texts;
        }

        static IntPtr[] Handles(Gpt2Session[] sessions)
        {
            var handles = new IntPtr[sessions.Length];
            for (int i = 0; i < sessions.Length; i++)
            {
                if (sessions[i] == null) throw new ArgumentNullException("sessions[" + i + "]");
                handles[i] = sessions[i].Handle;
            }
            return handles;
        }

        /// <summary>Frees the session (and its model, when the model was disposed before it).</summary>
        public void Dispose()
        {
            if (handle == IntPtr.Zero) return;
            Gpt2Native.gpt2_session_free(handle);
            handle = IntPtr.Zero;
            if (abortHandle.IsAllocated) abortHandle.Free();
            model.Release();
        }

        // What OnAbort needs: the caller's predicate, and an exception it threw, to rethrow.
        sealed class AbortState
        {
            public Func<bool> ShouldAbort;
            public ExceptionDispatchInfo Failure;

            public void RethrowFailure()
            {
                ExceptionDispatchInfo failure = Failure;
                Failure = null;
                if (failure != null) failure.Throw();
            }
        }

        // gpt2_generate_params for one call: the options' values, the callbacks pointed at one
        // GenerateCall, and the pinned and unmanaged memory they refer to, until Dispose.
        sealed class GenerateCallParams : IDisposable
        {
            public Gpt2Native.gpt2_generate_params Native;
            public readonly GenerateCall Call;
            GCHandle callHandle, biasHandle, stopHandle;
            readonly List<IntPtr> stopStrings = new List<IntPtr>();

            public GenerateCallParams(Gpt2GenerateOptions options, Gpt2TokenHandler onToken)
            {
                if (options == null) options = new Gpt2GenerateOptions();
                Call = new GenerateCall(onToken, options.OnLogits);
                try
                {
                    callHandle = GCHandle.Alloc(Call);
                    Native = Gpt2Native.gpt2_generate_default_params();
                    Native.max_new_tokens = options.MaxNewTokens;
                    Native.temperature = options.Temperature;
                    Native.top_k = options.TopK;
                    Native.seed = options.Seed;
                    Native.top_p = options.TopP;
                    Native.min_p = options.MinP;
                    Native.repeat_penalty = options.RepeatPenalty;
                    Native.repeat_last_n = options.RepeatLastN;
                    Native.presence_penalty = options.PresencePenalty;
                    Native.frequency_penalty = options.FrequencyPenalty;
                    Native.stop_at_eos = options.StopAtEos ? 1 : 0;
                    if (options.Grammar != null) Native.grammar = options.Grammar.Handle;
                    Native.on_token = TokenThunkPointer;
                    Native.user = GCHandle.ToIntPtr(callHandle);
                    if (options.OnLogits != null) Native.on_logits = LogitsThunkPointer;
                    if (options.LogitBias != null && options.LogitBias.Length > 0)
                    {
                        biasHandle = GCHandle.Alloc(options.LogitBias, GCHandleType.Pinned);
                        Native.logit_bias = biasHandle.AddrOfPinnedObject();
                        Native.n_logit_bias = (UIntPtr)options.LogitBias.Length;
                    }
                    if (options.Stop != null && options.Stop.Length > 0)
                    {
                        foreach (string s in options.Stop)
                        {
                            byte[] bytes = Gpt2Native.Utf8z(s);
                            IntPtr copy = Marshal.AllocHGlobal(bytes.Length);
                            stopStrings.Add(copy);
                            Marshal.Copy(bytes, 0, copy, bytes.Length);
                        }
                        IntPtr[] pointers = stopStrings.ToArray();
                        stopHandle = GCHandle.Alloc(pointers, GCHandleType.Pinned);
                        Native.stop = stopHandle.AddrOfPinnedObject();
                        Native.n_stop = (UIntPtr)pointers.Length;
                    }
                }
                catch
                {
                    Dispose();
                    throw;
                }
            }

            public void Dispose()
            {
                if (callHandle.IsAllocated) callHandle.Free();
                if (biasHandle.IsAllocated) biasHandle.Free();
                if (stopHandle.IsAllocated) stopHandle.Free();
                foreach (IntPtr s in stopStrings) Marshal.FreeHGlobal(s);
                stopStrings.Clear();
            }
        }

        // What the static callbacks need during one Generate call.
        sealed class GenerateCall
        {
            public readonly Gpt2TokenHandler OnToken;
            public readonly Action<float[]> OnLogits;
            public readonly StringBuilder Text = new StringBuilder();
            public float[] Logits;
            public ExceptionDispatchInfo Failure;

            public GenerateCall(Gpt2TokenHandler onToken, Action<float[]> onLogits)
            {
                OnToken = onToken;
                OnLogits = onLogits;
            }
        }

        [MonoPInvokeCallback(typeof(Gpt2Native.gpt2_token_fn))]
        static int OnToken(IntPtr user, int token, IntPtr text, UIntPtr textLen)
        {
            var call = (GenerateCall)GCHandle.FromIntPtr(user).Target;
            if (call.Failure != null) return 1;
            try
            {
                string piece = Gpt2Native.FromUtf8(text, (int)textLen);
                call.Text.Append(piece);
                return call.OnToken == null || call.OnToken(token, piece) ? 0 : 1;
            }
            catch (Exception e)
            {
                call.Failure = ExceptionDispatchInfo.Capture(e);
                return 1;
            }
        }

        [MonoPInvokeCallback(typeof(Gpt2Native.gpt2_abort_fn))]
        static int OnAbort(IntPtr user)
        {
            var state = (AbortState)GCHandle.FromIntPtr(user).Target;
            if (state.Failure != null) return 1;
            Func<bool> shouldAbort = state.ShouldAbort;
            if (shouldAbort == null) return 0;
            try
            {
                return shouldAbort() ? 1 : 0;
            }
            catch (Exception e)
            {
                state.Failure = ExceptionDispatchInfo.Capture(e); // rethrown when the call returns
                return 1;
            }
        }

        [MonoPInvokeCallback(typeof(Gpt2Native.gpt2_logits_fn))]
        static void OnLogits(IntPtr user, IntPtr logits, int nVocab)
        {
            var call = (GenerateCall)GCHandle.FromIntPtr(user).Target;
            if (call.Failure != null) return;
            try
            {
                if (call.Logits == null || call.Logits.Length != nVocab) call.Logits = new float[nVocab];
                Marshal.Copy(logits, call.Logits, 0, nVocab);
                call.OnLogits(call.Logits);
                Marshal.Copy(call.Logits, 0, logits, nVocab);
            }
            catch (Exception e)
            {
                call.Failure = ExceptionDispatchInfo.Capture(e); // on_token stops generation next
            }
        }
    }
}
