// Gpt2.cs - an idiomatic layer over Gpt2Native.cs: Gpt2Model and Gpt2Session own the native
// objects (IDisposable, in any order), failures throw Gpt2Exception with the library's message,
// generation streams text through a delegate or a Gpt2TokenQueue, and GenerateAsync runs it as a
// Task with a CancellationToken. Names are .NET's (Gpt2Result.Busy for GPT2_ERROR_BUSY); the
// values are the C API's.
//
// Callbacks work under IL2CPP (Unity's ahead-of-time compiler), which can only hand native code
// static methods marked [MonoPInvokeCallback]: the library calls one static method per callback
// kind, with `user` = a GCHandle of the object that holds the caller's delegate for that call.
// An exception thrown by the caller's delegate never crosses the native frames: it stops
// generation and is rethrown when the native call has returned.
using System;
using System.Collections.Generic;
using System.IO;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
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
    /// <summary>gpt2_result with .NET names: the same values (Busy = GPT2_ERROR_BUSY).</summary>
    public enum Gpt2Result
    {
        Ok = 0,
        InvalidArgument,
        Io,
        BadFile,
        Unsupported,
        OutOfMemory,
        BadToken,
        ContextFull,
        NoVocabulary,
        BadText,
        Device,
        Aborted,
        Internal,
        Busy,
        BadGrammar,
        BadState
    }

    /// <summary>gpt2_end: why a generation ended (Gpt2Session.LastEnd).</summary>
    public enum Gpt2End
    {
        /// <summary>MaxNewTokens tokens were generated (with a grammar: see LastComplete).</summary>
        MaxTokens = 0,
        /// <summary>The grammar's sentence is whole and nothing may extend it.</summary>
        Grammar,
        /// <summary>The text contains one of the Stop strings.</summary>
        Stop,
        /// <summary>The end-of-text token, with StopAtEos.</summary>
        Eos,
        /// <summary>onToken returned false.</summary>
        Callback,
        /// <summary>ShouldAbort or the call's CancellationToken stopped it: the session is as before the call.</summary>
        Aborted,
        /// <summary>The generation failed (the Gpt2Exception says why).</summary>
        Error
    }

    /// <summary>gpt2_match: whether a text is a whole sentence of a grammar, the start of one, or neither.</summary>
    public enum Gpt2Match { None = 0, Prefix = 1, Complete = 2 }

    /// <summary>gpt2_log_level.</summary>
    public enum Gpt2LogLevel { Error = 0, Warning, Info, Debug }

    /// <summary>gpt2_context_policy: what a full context does (see Gpt2SessionOptions).</summary>
    public enum Gpt2ContextPolicy { Exact = 0, Discard = 1 }

    /// <summary>A gpt2.h function failed: Code is its result, Message the library's sentence.</summary>
    public class Gpt2Exception : Exception
    {
        public Gpt2Result Code { get; private set; }

        public Gpt2Exception(Gpt2Result code, string message) : base(message) { Code = code; }

        internal static void ThrowIfFailed(gpt2_result result, ref Gpt2Native.gpt2_error err)
        {
            if (result == gpt2_result.GPT2_OK) return;
            string message = err.Message;
            if (message.Length == 0) message = Gpt2Native.FromUtf8z(Gpt2Native.gpt2_result_string(result));
            throw new Gpt2Exception((Gpt2Result)result, message);
        }
    }

    /// <summary>Receives each generated token's text; return false to stop generating after it: the call
    /// returns the text so far and the session keeps it (unlike ShouldAbort and a CancellationToken,
    /// which throw and roll the call back; see Gpt2Session).</summary>
    public delegate bool Gpt2TokenHandler(int token, string text);

    /// <summary>The library as a whole: its version, and the ABI check every constructor runs first.</summary>
    public static class Gpt2Library
    {
        static readonly object abiLock = new object();
        static bool abiChecked;

        public static int Version
        {
            get
            {
                try { return Gpt2Native.gpt2_version(); }
                catch (DllNotFoundException e) { throw NotFound(e); }
            }
        }

        public static string VersionString
        {
            get
            {
                try { return Gpt2Native.FromUtf8z(Gpt2Native.gpt2_version_string()); }
                catch (DllNotFoundException e) { throw NotFound(e); }
            }
        }

        /// <summary>Throws Gpt2Exception when the native library is of another version, or its structs
        /// are not the ones declared in Gpt2Native.cs; DllNotFoundException naming the file and the
        /// folders it was looked for in when there is none.</summary>
        public static void CheckAbi()
        {
            lock (abiLock)
            {
                if (abiChecked) return;
                Gpt2Native.gpt2_error err;
                gpt2_result result;
                try
                {
                    result = Gpt2Native.gpt2_check_abi(Gpt2Native.GPT2_VERSION,
                        (UIntPtr)Marshal.SizeOf(typeof(Gpt2Native.gpt2_model_params)),
                        (UIntPtr)Marshal.SizeOf(typeof(Gpt2Native.gpt2_session_params)),
                        (UIntPtr)Marshal.SizeOf(typeof(Gpt2Native.gpt2_generate_params)),
                        (UIntPtr)Marshal.SizeOf(typeof(Gpt2Native.gpt2_model_info)), out err);
                }
                catch (DllNotFoundException e)
                {
                    throw NotFound(e);
                }
                catch (EntryPointNotFoundException e)
                {
                    throw new DllNotFoundException("the library loaded as \"" + Gpt2Native.Library + "\" has no gpt2_check_abi: it is another " +
                                                   "library of that name, or a gpt2 older than the binding (" + e.Message + ")", e);
                }
                Gpt2Exception.ThrowIfFailed(result, ref err);
                abiChecked = true;
            }
        }

        /// <summary>The native library's file name on this platform: gpt2.dll, libgpt2.dylib or libgpt2.so.</summary>
        public static string FileName
        {
            get
            {
                if (Path.DirectorySeparatorChar == '\\') return "gpt2.dll";
                return IsMacOS ? "libgpt2.dylib" : "libgpt2.so";
            }
        }

        static string FullPath(string folder)
        {
            try { return Path.GetFullPath(folder).TrimEnd(Path.DirectorySeparatorChar); }
            catch (Exception) { return folder; }
        }

        // Mono reports macOS as Unix; its system folders tell it apart.
        static bool IsMacOS { get { return Directory.Exists("/System/Library/Frameworks") && Directory.Exists("/Applications"); } }

        // A DllNotFoundException that says which file was wanted, the folders the runtime looks in
        // (and whether the file is there: then it exists but did not load) and how to get it.
        static DllNotFoundException NotFound(DllNotFoundException e)
        {
            string file = FileName;
            bool windows = Path.DirectorySeparatorChar == '\\';
            string variable = windows ? "PATH" : IsMacOS ? "DYLD_LIBRARY_PATH" : "LD_LIBRARY_PATH";
            // The folders DllImport searches: the declaring assembly's and the application's; on
            // Windows the current folder too; then the loader's path variable and the system's.
            var folders = new List<string>();
            string assembly = typeof(Gpt2Library).Assembly.Location;
            if (!string.IsNullOrEmpty(assembly)) folders.Add(Path.GetDirectoryName(assembly));
            folders.Add(AppDomain.CurrentDomain.BaseDirectory);
            if (windows) folders.Add(Environment.CurrentDirectory);
            string searchPath = Environment.GetEnvironmentVariable(variable) ?? "";
            foreach (string folder in searchPath.Split(Path.PathSeparator))
                if (folder.Length > 0) folders.Add(folder);
            var looked = new StringBuilder();
            var seen = new HashSet<string>();
            string present = null;
            foreach (string folder in folders)
            {
                string full = FullPath(folder);
                if (!seen.Add(full)) continue;
                bool there = File.Exists(Path.Combine(full, file));
                if (there && present == null) present = Path.Combine(full, file);
                looked.Append(looked.Length == 0 ? "" : ", ").Append(full).Append(there ? " (there, but it did not load)" : "");
            }
            string message = "the native library " + file + " (DllImport \"" + Gpt2Native.Library + "\") was not found: looked in " + looked +
                             ", " + variable + (searchPath.Length == 0 ? " (unset)" : "") + " and the system's library folders. ";
            string current = FullPath(Environment.CurrentDirectory);
            if (present != null)
                message += present + " exists but did not load: it is for another architecture (32/64-bit, x86/ARM) or a library it needs is missing. ";
            else if (!seen.Contains(current) && File.Exists(Path.Combine(current, file)))
                message += "There is one in the current folder, " + current + ", which is not searched here: add it to " + variable + ". ";
            message += "Build it with cmake -DGPT2_BUILD_SHARED=ON (README, \"Shared library and C#\") and put it beside the program " +
                       "(Unity: under Assets/Plugins, its platform set in the inspector). The runtime said: " + e.Message;
            return new DllNotFoundException(message, e);
        }
    }

    // A native object's pointer and the calls that hold it, so that Dispose on one thread (Unity's
    // OnDestroy, a scene change) never frees what a call on another thread (a GenerateAsync's task)
    // still uses: Dispose marks the object, and whoever lets go of it last frees it, Dispose itself
    // when no call holds it, otherwise the last call to end. A model is held by its sessions and
    // grammars, a grammar by the calls that generate with it, a session by its own calls.
    sealed class NativeLease
    {
        readonly object gate = new object();
        readonly string owner;
        readonly Action<IntPtr> free;
        IntPtr handle;
        int holders;
        bool disposed;

        public NativeLease(string owner, Action<IntPtr> free)
        {
            this.owner = owner;
            this.free = free;
        }

        // The native object, once made.
        public void Set(IntPtr made) { handle = made; }

        public bool IsDisposed { get { lock (gate) return disposed; } }

        // The pointer without holding it (for Handle): valid only while nothing disposes the object.
        public IntPtr Peek()
        {
            lock (gate)
            {
                if (disposed) throw new ObjectDisposedException(owner);
                return handle;
            }
        }

        // The pointer, held until Exit; ObjectDisposedException once the object is disposed.
        public IntPtr Enter()
        {
            lock (gate)
            {
                if (disposed) throw new ObjectDisposedException(owner);
                holders++;
                return handle;
            }
        }

        // The pointer, held until Exit, also once the object is disposed: for a holder's further hold
        // (a session's model for the model's own stage), valid because that holder keeps it alive.
        public IntPtr EnterHeld()
        {
            lock (gate)
            {
                if (handle == IntPtr.Zero) throw new ObjectDisposedException(owner);
                holders++;
                return handle;
            }
        }

        public void Exit()
        {
            IntPtr last = IntPtr.Zero;
            lock (gate)
            {
                holders--;
                if (disposed && holders == 0) last = TakeHandle();
            }
            if (last != IntPtr.Zero) free(last);
        }

        // True when this call disposed it (a second Dispose does nothing).
        public bool Dispose()
        {
            IntPtr last;
            lock (gate)
            {
                if (disposed) return false;
                disposed = true;
                if (holders > 0) return true;
                last = TakeHandle();
            }
            if (last != IntPtr.Zero) free(last);
            return true;
        }

        IntPtr TakeHandle()
        {
            IntPtr taken = handle;
            handle = IntPtr.Zero;
            return taken;
        }
    }

    /// <summary>Weights and vocabulary, immutable: share one between sessions and threads.</summary>
    public sealed class Gpt2Model : IDisposable
    {
        static readonly Gpt2Native.gpt2_log_fn LogThunk = OnLog;
        static readonly IntPtr LogThunkPointer = Marshal.GetFunctionPointerForDelegate(LogThunk);

        GCHandle logHandle;
        IntPtr buffer; // a byte[] model's copy, 64-byte aligned (the library then uses it in place): freed with the model
        // The native model outlives this object's Dispose while sessions and grammars use it (Unity
        // does not order OnDestroy): it is freed with the last of them.
        readonly NativeLease lease;

        /// <summary>Loads a GGUF file. log (may be null) receives the library's messages, on the loading thread.</summary>
        public Gpt2Model(string path, Action<Gpt2LogLevel, string> log = null, bool noMmap = false)
        {
            lease = new NativeLease("Gpt2Model", FreeNative);
            if (path == null) throw new ArgumentNullException("path");
            Load(log, (ref Gpt2Native.gpt2_model_params p, out IntPtr model, out Gpt2Native.gpt2_error err) => {
                p.no_mmap = noMmap ? 1 : 0;
                return Gpt2Native.gpt2_model_load_file(Gpt2Native.Utf8z(path), ref p, out model, out err);
            });
        }

        /// <summary>Loads a whole GGUF file's bytes (gpt2_model_load_memory): a model from a Unity
        /// TextAsset's .bytes, an Android APK's asset or a download. The bytes are copied once, into
        /// memory the model keeps; the array may be dropped or reused afterwards.</summary>
        public Gpt2Model(byte[] gguf, Action<Gpt2LogLevel, string> log = null)
        {
            lease = new NativeLease("Gpt2Model", FreeNative);
            if (gguf == null) throw new ArgumentNullException("gguf");
            Load(log, (ref Gpt2Native.gpt2_model_params p, out IntPtr model, out Gpt2Native.gpt2_error err) => {
                buffer = Marshal.AllocHGlobal(gguf.Length + 63);
                IntPtr aligned = new IntPtr((buffer.ToInt64() + 63) & ~63L);
                Marshal.Copy(gguf, 0, aligned, gguf.Length);
                return Gpt2Native.gpt2_model_load_memory(aligned, (UIntPtr)gguf.Length, ref p, out model, out err);
            });
        }

        delegate gpt2_result Loader(ref Gpt2Native.gpt2_model_params p, out IntPtr model, out Gpt2Native.gpt2_error err);

        void Load(Action<Gpt2LogLevel, string> log, Loader load)
        {
            Gpt2Library.CheckAbi();
            Gpt2Native.gpt2_model_params p = Gpt2Native.gpt2_model_default_params();
            if (log != null)
            {
                logHandle = GCHandle.Alloc(log);
                p.log = LogThunkPointer;
                p.log_user = GCHandle.ToIntPtr(logHandle);
            }
            Gpt2Native.gpt2_error err;
            IntPtr handle;
            gpt2_result result = load(ref p, out handle, out err);
            lease.Set(handle);
            if (result != gpt2_result.GPT2_OK)
            {
                if (logHandle.IsAllocated) logHandle.Free();
                if (buffer != IntPtr.Zero) Marshal.FreeHGlobal(buffer);
                buffer = IntPtr.Zero;
            }
            Gpt2Exception.ThrowIfFailed(result, ref err);
        }

        /// <summary>The native gpt2_model*, for calls of your own into Gpt2Native; not held: valid
        /// while this model is not disposed. ObjectDisposedException once it is.</summary>
        public IntPtr Handle { get { return lease.Peek(); } }

        // A session's or a grammar's hold on the native model (taken when it is made, released when
        // it is freed), or one call's.
        internal IntPtr Acquire() { return lease.Enter(); }

        // A further hold for something a session of this model makes (its model's own stage), also
        // once this object is disposed: the session keeps the native model alive.
        internal IntPtr AcquireHeld() { return lease.EnterHeld(); }

        internal void Release() { lease.Exit(); }

        readonly object stageGate = new object();
        Gpt2Stage ownStage; // GenerateAsync's lines, stepped by the stage's own thread; made at first use

        /// <summary>The threads of the passes of the model's own stage, where GenerateAsync's lines run
        /// (0, the default: one per core). Set it before the first GenerateAsync.</summary>
        public int StageThreads { get; set; }

        // GenerateAsync: the line joins the model's own stage, so that every character's line shares
        // one pass over the weights per token.
        internal Task<string> GenerateOnOwnStage(Gpt2Session session, string prompt, Gpt2GenerateOptions options, Gpt2TokenQueue tokens,
                                                 CancellationToken cancellationToken)
        {
            lock (stageGate)
            {
                if (ownStage == null) ownStage = Gpt2Stage.SteppedByItsOwnThread(this, StageThreads);
                return ownStage.Add(session, prompt, options, tokens, cancellationToken);
            }
        }

        // The own stage's thread, when it has no line: true when the stage is to go (this model was
        // disposed; a later GenerateAsync of a session that outlives it makes a new one).
        internal bool CloseOwnStageIfIdle(Gpt2Stage stage)
        {
            lock (stageGate)
            {
                if (!lease.IsDisposed || stage.Active > 0) return false;
                ownStage = null;
            }
            return true;
        }

        void FreeNative(IntPtr handle)
        {
            Gpt2Native.gpt2_model_free(handle);
            if (logHandle.IsAllocated) logHandle.Free();
            if (buffer != IntPtr.Zero) Marshal.FreeHGlobal(buffer);
            buffer = IntPtr.Zero;
        }

        public Gpt2Native.gpt2_model_info Info
        {
            get
            {
                IntPtr model = Acquire();
                try
                {
                    return Gpt2Native.gpt2_model_get_info(model);
                }
                finally
                {
                    Release();
                }
            }
        }
        public string Name { get { return Gpt2Native.FromUtf8z(Info.name); } }

        /// <summary>The token ids of text in the model's vocabulary (gpt2_tokenize).</summary>
        public int[] Tokenize(string text, bool allowSpecial = false)
        {
            if (text == null) throw new ArgumentNullException("text");
            byte[] bytes = Encoding.UTF8.GetBytes(text);
            IntPtr model = Acquire();
            try
            {
                Gpt2Native.gpt2_error err;
                UIntPtr needed;
                gpt2_result result = Gpt2Native.gpt2_tokenize(model, bytes, (UIntPtr)bytes.Length, allowSpecial ? 1 : 0,
                                                              null, UIntPtr.Zero, out needed, out err);
                Gpt2Exception.ThrowIfFailed(result, ref err);
                int[] tokens = new int[(int)needed];
                result = Gpt2Native.gpt2_tokenize(model, bytes, (UIntPtr)bytes.Length, allowSpecial ? 1 : 0,
                                                  tokens, (UIntPtr)tokens.Length, out needed, out err);
                Gpt2Exception.ThrowIfFailed(result, ref err);
                return tokens;
            }
            finally
            {
                Release();
            }
        }

        /// <summary>The text of token ids (gpt2_detokenize).</summary>
        public string Detokenize(int[] tokens)
        {
            if (tokens == null) throw new ArgumentNullException("tokens");
            IntPtr model = Acquire();
            try
            {
                Gpt2Native.gpt2_error err;
                UIntPtr needed;
                gpt2_result result = Gpt2Native.gpt2_detokenize(model, tokens, (UIntPtr)tokens.Length, null, UIntPtr.Zero, out needed, out err);
                Gpt2Exception.ThrowIfFailed(result, ref err);
                byte[] text = new byte[(int)needed];
                result = Gpt2Native.gpt2_detokenize(model, tokens, (UIntPtr)tokens.Length, text, (UIntPtr)text.Length, out needed, out err);
                Gpt2Exception.ThrowIfFailed(result, ref err);
                return Encoding.UTF8.GetString(text);
            }
            finally
            {
                Release();
            }
        }

        /// <summary>Frees the model, or, while sessions of it live, lets the last of them free it: they
        /// keep working, and this object's own members throw ObjectDisposedException from now on.
        /// No finalizer: a forgotten model leaks rather than being freed under a session.</summary>
        public void Dispose()
        {
            lease.Dispose();
            lock (stageGate)
                if (ownStage != null) ownStage.Wake(); // its thread frees it once its lines have ended
        }

        [MonoPInvokeCallback(typeof(Gpt2Native.gpt2_log_fn))]
        static void OnLog(IntPtr user, gpt2_log_level level, IntPtr message)
        {
            try
            {
                ((Action<Gpt2LogLevel, string>)GCHandle.FromIntPtr(user).Target)((Gpt2LogLevel)level, Gpt2Native.FromUtf8z(message));
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

        // A copy for a call that runs later on another thread (GenerateAsync): its own arrays.
        internal Gpt2GenerateOptions Copy()
        {
            var copy = (Gpt2GenerateOptions)MemberwiseClone();
            if (LogitBias != null) copy.LogitBias = (Gpt2Native.gpt2_logit_bias[])LogitBias.Clone();
            if (Stop != null) copy.Stop = (string[])Stop.Clone();
            return copy;
        }

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

    /// <summary>A grammar in llama.cpp's GBNF (docs/GRAMMARS.md), or made from a JSON Schema
    /// (FromJsonSchema), for one model's vocabulary: set it as Gpt2GenerateOptions.Grammar and the
    /// generated text follows it. Immutable: share it between sessions and threads. It keeps its
    /// model's native memory alive until it is freed, and a call generating with it (one of
    /// GenerateAsync's tasks too, from the moment it is asked) keeps the grammar alive: Dispose
    /// during such a call frees it when the call ends.</summary>
    public sealed class Gpt2Grammar : IDisposable
    {
        readonly Gpt2Model model;
        readonly NativeLease lease;

        Gpt2Grammar(Gpt2Model model, IntPtr handle)
        {
            this.model = model;
            lease = new NativeLease("Gpt2Grammar", FreeNative);
            lease.Set(handle);
        }

        /// <summary>The grammar of the JSON values a JSON Schema accepts (docs/GRAMMARS.md lists the
        /// keywords enforced). compact: no whitespace between JSON's tokens; maxWhitespace: the
        /// longest run of it otherwise (0 = 20); anyOrder: an object's properties in any order, each
        /// at most once (else in the order the schema defines them); integerFraction: "type":
        /// "integer" also takes 1.0. Throws Gpt2Exception (Gpt2Result.BadGrammar) naming a keyword
        /// that is not enforced and its JSON pointer, where malformed JSON goes wrong, or the
        /// characters no token holds when the model's vocabulary cannot write any value.</summary>
        public static Gpt2Grammar FromJsonSchema(Gpt2Model model, string schema, bool compact = false, int maxWhitespace = 0,
                                                 bool anyOrder = false, bool integerFraction = false)
        {
            if (model == null) throw new ArgumentNullException("model");
            if (schema == null) throw new ArgumentNullException("schema");
            if (maxWhitespace < 0) throw new ArgumentOutOfRangeException("maxWhitespace", "the longest whitespace run cannot be negative");
            byte[] bytes = Encoding.UTF8.GetBytes(schema);
            var p = new Gpt2Native.gpt2_json_schema_params { compact = compact ? 1 : 0, max_whitespace = (uint)maxWhitespace,
                                                             any_order = anyOrder ? 1 : 0, integer_fraction = integerFraction ? 1 : 0 };
            IntPtr modelHandle = model.Acquire();
            Gpt2Native.gpt2_error err;
            IntPtr made;
            gpt2_result result = Gpt2Native.gpt2_grammar_from_json_schema(modelHandle, bytes, (UIntPtr)bytes.Length, ref p, out made, out err);
            if (result != gpt2_result.GPT2_OK) model.Release();
            Gpt2Exception.ThrowIfFailed(result, ref err);
            return new Gpt2Grammar(model, made);
        }

        /// <summary>Throws Gpt2Exception (Gpt2Result.BadGrammar) naming the line, the column and what is wrong,
        /// or the characters no token holds when the model's vocabulary cannot write any sentence.</summary>
        public Gpt2Grammar(Gpt2Model model, string gbnf, string root = null)
        {
            if (model == null) throw new ArgumentNullException("model");
            if (gbnf == null) throw new ArgumentNullException("gbnf");
            IntPtr modelHandle = model.Acquire();
            Gpt2Native.gpt2_error err;
            IntPtr handle;
            gpt2_result result = Gpt2Native.gpt2_grammar_from_gbnf(modelHandle, Gpt2Native.Utf8z(gbnf), root == null ? null : Gpt2Native.Utf8z(root),
                                                                   out handle, out err);
            if (result != gpt2_result.GPT2_OK) model.Release();
            Gpt2Exception.ThrowIfFailed(result, ref err);
            this.model = model;
            lease = new NativeLease("Gpt2Grammar", FreeNative);
            lease.Set(handle);
        }

        /// <summary>The native gpt2_grammar*, for calls of your own into Gpt2Native; not held: valid
        /// while this grammar is not disposed. ObjectDisposedException once it is.</summary>
        public IntPtr Handle { get { return lease.Peek(); } }

        // A call's hold on the native grammar, released with Release when the call ends.
        internal IntPtr Acquire() { return lease.Enter(); }

        internal void Release() { lease.Exit(); }

        void FreeNative(IntPtr handle)
        {
            Gpt2Native.gpt2_grammar_free(handle);
            model.Release();
        }

        /// <summary>Whether text is a whole sentence of the grammar, the beginning of one, or neither.</summary>
        public Gpt2Match Match(string text)
        {
            byte[] bytes = Encoding.UTF8.GetBytes(text ?? "");
            Gpt2Native.gpt2_error err;
            gpt2_match match;
            gpt2_result result;
            IntPtr grammar = Acquire();
            try
            {
                result = Gpt2Native.gpt2_grammar_match(grammar, bytes, (UIntPtr)bytes.Length, out match, out err);
            }
            finally
            {
                Release();
            }
            Gpt2Exception.ThrowIfFailed(result, ref err);
            return (Gpt2Match)match;
        }

        /// <summary>Frees the grammar, or, while calls generate with it, lets the last of them free it.
        /// Its members throw ObjectDisposedException from now on.</summary>
        public void Dispose() { lease.Dispose(); }
    }

    /// <summary>What Gpt2Session.Choose found: the most likely option's index and text, and every
    /// option's log-probability (natural log, the sum over its tokens), in the order given.</summary>
    public sealed class Gpt2Choice
    {
        public readonly int Best;
        public readonly string Choice;
        public readonly float[] Logprobs;
        public Gpt2Choice(int best, string choice, float[] logprobs) { Best = best; Choice = choice; Logprobs = logprobs; }
    }

    /// <summary>What gpt2_session_params holds, with the library's defaults (see gpt2.h).</summary>
    public sealed class Gpt2SessionOptions
    {
        /// <summary>Worker threads, the caller's included (n_threads); 0 = all cores, 1 = only the caller's.</summary>
        public int Threads;
        /// <summary>The context to allocate the KV cache for (n_ctx); 0 = the model's, at most the model's.</summary>
        public int ContextLength;
        /// <summary>The KV cache in 16-bit floats: half the memory (kv_f16).</summary>
        public bool KvF16;
        /// <summary>What a full context does (context_policy): Exact recomputes the last n_ctx tokens for
        /// every new token, as nanoGPT; Discard drops DiscardTokens old tokens at once, keeping the first KeepTokens.</summary>
        public Gpt2ContextPolicy ContextPolicy;
        /// <summary>With Discard: tokens at the start that never go, a persona or a preamble (n_keep).</summary>
        public int KeepTokens;
        /// <summary>With Discard: tokens dropped at once (n_discard); 0 = half of those not kept.</summary>
        public int DiscardTokens;

        public Gpt2SessionOptions()
        {
            Gpt2Library.CheckAbi();
            Gpt2Native.gpt2_session_params d = Gpt2Native.gpt2_session_default_params();
            Threads = d.n_threads;
            ContextLength = d.n_ctx;
            KvF16 = d.kv_f16 != 0;
            ContextPolicy = (Gpt2ContextPolicy)d.context_policy;
            KeepTokens = d.n_keep;
            DiscardTokens = d.n_discard;
        }

        internal Gpt2Native.gpt2_session_params ToNative()
        {
            Gpt2Native.gpt2_session_params p = Gpt2Native.gpt2_session_default_params();
            p.n_threads = Threads;
            p.n_ctx = ContextLength;
            p.kv_f16 = KvF16 ? 1 : 0;
            p.context_policy = (gpt2_context_policy)ContextPolicy;
            p.n_keep = KeepTokens;
            p.n_discard = DiscardTokens;
            return p;
        }
    }

    /// <summary>Generated text on its way from the thread that generates to the one that shows it:
    /// GenerateAsync adds each piece on a worker thread, the game takes them in Update on the main
    /// thread (Unity's API may only be used there). Thread-safe; pieces come out in order.</summary>
    public sealed class Gpt2TokenQueue
    {
        readonly Queue<KeyValuePair<int, string>> pieces = new Queue<KeyValuePair<int, string>>();

        /// <summary>Adds one token's text; returns true (go on), so that it serves as a Gpt2TokenHandler:
        /// session.Generate(prompt, options, queue.Add).</summary>
        public bool Add(int token, string text)
        {
            lock (pieces) pieces.Enqueue(new KeyValuePair<int, string>(token, text));
            return true;
        }

        /// <summary>Pieces waiting.</summary>
        public int Count { get { lock (pieces) return pieces.Count; } }

        /// <summary>Takes the oldest piece; false when none waits.</summary>
        public bool TryDequeue(out int token, out string text)
        {
            lock (pieces)
            {
                if (pieces.Count == 0)
                {
                    token = -1;
                    text = null;
                    return false;
                }
                KeyValuePair<int, string> piece = pieces.Dequeue();
                token = piece.Key;
                text = piece.Value;
                return true;
            }
        }

        /// <summary>Takes the oldest piece's text; false when none waits.</summary>
        public bool TryDequeue(out string text)
        {
            int token;
            return TryDequeue(out token, out text);
        }

        /// <summary>Takes every waiting piece; their text, oldest first ("" when none waits).</summary>
        public string DequeueAll()
        {
            var text = new StringBuilder();
            lock (pieces)
                while (pieces.Count > 0) text.Append(pieces.Dequeue().Value);
            return text.ToString();
        }

        public void Clear() { lock (pieces) pieces.Clear(); }
    }

    /// <summary>One conversation (KV cache, RNG, worker threads). One call at a time: a call while another
    /// thread's call runs (a GenerateAsync not yet finished included) throws Gpt2Exception with
    /// Gpt2Result.Busy and changes nothing.
    ///
    /// Two ways to stop generating, which differ in what stays:
    ///   - onToken returns false (also: a Stop string, MaxNewTokens, StopAtEos): generation ends after
    ///     that token, Generate returns the text so far, and the session keeps the prompt and every
    ///     token made (Truncate removes them). Checked once per token.
    ///   - ShouldAbort returns true, or the call's CancellationToken is cancelled: checked between the
    ///     layers of every pass (a long prompt too, so it stops within one layer's time); the call throws
    ///     (Gpt2Exception with Gpt2Result.Aborted, OperationCanceledException for the token; GenerateAsync's
    ///     task ends Canceled) and the session is exactly as before the call: the prompt and the tokens
    ///     made are gone, though the pieces already given to onToken or a Gpt2TokenQueue were given.</summary>
    public sealed class Gpt2Session : IDisposable
    {
        static readonly Gpt2Native.gpt2_token_fn TokenThunk = OnToken;
        static readonly IntPtr TokenThunkPointer = Marshal.GetFunctionPointerForDelegate(TokenThunk);
        static readonly Gpt2Native.gpt2_logits_fn LogitsThunk = OnLogits;
        static readonly IntPtr LogitsThunkPointer = Marshal.GetFunctionPointerForDelegate(LogitsThunk);
        static readonly Gpt2Native.gpt2_abort_fn AbortThunk = OnAbort;
        static readonly IntPtr AbortThunkPointer = Marshal.GetFunctionPointerForDelegate(AbortThunk);

        // The CancellationToken of the call running on this thread. abort_fn is polled on the calling
        // thread, so a token reaches its own call only, never another thread's call on the same session.
        [ThreadStatic] static CancellationToken callCancellation;

        readonly NativeLease lease; // held by each call; Dispose during one frees the session when it ends
        readonly Gpt2Model model; // its native model lives until this session is freed
        readonly int nVocab;
        readonly AbortState abort = new AbortState();
        GCHandle abortHandle; // abort_user: the library polls OnAbort with it for the session's life

        /// <summary>A session of model with the given options (null: the defaults).</summary>
        public Gpt2Session(Gpt2Model model, Gpt2SessionOptions options = null)
            : this(model, options == null ? Gpt2Native.gpt2_session_default_params() : options.ToNative(), true) { }

        /// <summary>A session with the native params; set ShouldAbort instead of p.abort_fn.</summary>
        [Obsolete("use Gpt2Session(model, new Gpt2SessionOptions { ... })")]
        public Gpt2Session(Gpt2Model model, Gpt2Native.gpt2_session_params p) : this(model, p, true) { }

        Gpt2Session(Gpt2Model model, Gpt2Native.gpt2_session_params p, bool unused)
        {
            if (model == null) throw new ArgumentNullException("model");
            if (p.abort_fn != IntPtr.Zero) throw new ArgumentException("set Gpt2Session.ShouldAbort instead of abort_fn");
            this.model = model;
            lease = new NativeLease("Gpt2Session", FreeNative);
            IntPtr modelHandle = model.Acquire();
            nVocab = Gpt2Native.gpt2_model_get_info(modelHandle).n_vocab;
            abortHandle = GCHandle.Alloc(abort);
            p.abort_fn = AbortThunkPointer;
            p.abort_user = GCHandle.ToIntPtr(abortHandle);
            Gpt2Native.gpt2_error err;
            IntPtr handle;
            gpt2_result result = Gpt2Native.gpt2_session_create(modelHandle, ref p, out handle, out err);
            lease.Set(handle);
            if (result != gpt2_result.GPT2_OK)
            {
                abortHandle.Free();
                model.Release();
            }
            Gpt2Exception.ThrowIfFailed(result, ref err);
        }

        /// <summary>Polled between the layers of every pass, on the calling thread: return true to
        /// cancel the call in progress (a player left: stop the long prompt). The call then throws
        /// Gpt2Exception with Gpt2Result.Aborted and the session is as it was before it (see the class's
        /// summary for how this differs from onToken returning false). An exception thrown here cancels
        /// the call too and is rethrown from it. Null (the default): never. A CancellationToken given to
        /// one call does the same for that call.</summary>
        public Func<bool> ShouldAbort
        {
            get { return abort.ShouldAbort; }
            set { abort.ShouldAbort = value; }
        }

        /// <summary>The native gpt2_session*, for calls of your own into Gpt2Native; not held: valid
        /// while this session is not disposed. ObjectDisposedException once it is.</summary>
        public IntPtr Handle { get { return lease.Peek(); } }

        public Gpt2Model Model { get { return model; } }

        /// <summary>Why the last generation on this session ended (Generate, GenerateAsync once its
        /// task has ended, GenerateBatch).</summary>
        public Gpt2End LastEnd { get; private set; }

        /// <summary>Whether the last generation's text is whole: with a grammar, a whole sentence of
        /// it (false: MaxNewTokens cut it, the text is incomplete); without one, true.</summary>
        public bool LastComplete { get; private set; }

        void NoteEnd(GenerateCallParams p, gpt2_result result)
        {
            LastEnd = result == gpt2_result.GPT2_ERROR_ABORTED ? Gpt2End.Aborted : p.End;
            LastComplete = p.Complete;
        }

        // Runs call with the native session held, so that a Dispose meanwhile frees it only after.
        T Held<T>(Func<IntPtr, T> call)
        {
            IntPtr session = lease.Enter();
            try
            {
                return call(session);
            }
            finally
            {
                lease.Exit();
            }
        }

        /// <summary>The ids in context, oldest first.</summary>
        public int[] Tokens
        {
            get
            {
                return Held(session => {
                    int n = (int)Gpt2Native.gpt2_session_n_tokens(session);
                    int[] tokens = new int[n];
                    if (n > 0) Marshal.Copy(Gpt2Native.gpt2_session_tokens(session), tokens, 0, n);
                    return tokens;
                });
            }
        }

        /// <summary>Forgets the context (gpt2_session_reset).</summary>
        public void Reset() { Held(session => { Gpt2Native.gpt2_session_reset(session); return 0; }); }

        /// <summary>Keeps the first nTokens of the context (gpt2_session_truncate).</summary>
        public void Truncate(int nTokens)
        {
            if (nTokens < 0) throw new ArgumentOutOfRangeException("nTokens", "a token count cannot be negative");
            var err = default(Gpt2Native.gpt2_error);
            gpt2_result result = Held(session => Gpt2Native.gpt2_session_truncate(session, (UIntPtr)nTokens, out err));
            Gpt2Exception.ThrowIfFailed(result, ref err);
        }

        /// <summary>The conversation as bytes for a save game (gpt2_session_save).</summary>
        public byte[] SaveState()
        {
            return Held(session => {
                Gpt2Native.gpt2_error err;
                UIntPtr needed;
                gpt2_result result = Gpt2Native.gpt2_session_save(session, null, UIntPtr.Zero, out needed, out err);
                Gpt2Exception.ThrowIfFailed(result, ref err);
                byte[] state = new byte[(int)needed];
                result = Gpt2Native.gpt2_session_save(session, state, (UIntPtr)state.Length, out needed, out err);
                Gpt2Exception.ThrowIfFailed(result, ref err);
                return state;
            });
        }

        /// <summary>Continues a conversation SaveState saved (gpt2_session_load); a damaged or foreign
        /// state throws Gpt2Exception (Gpt2Result.BadState for bytes that are not a whole, intact
        /// state) and leaves the session as it was.</summary>
        public void LoadState(byte[] state)
        {
            if (state == null) throw new ArgumentNullException("state");
            var err = default(Gpt2Native.gpt2_error);
            gpt2_result result = Held(session => Gpt2Native.gpt2_session_load(session, state, (UIntPtr)state.Length, out err));
            Gpt2Exception.ThrowIfFailed(result, ref err);
        }

        /// <summary>Appends tokens to the context and runs the model over them (gpt2_session_eval);
        /// Logits then holds the prediction after the last one. A cancelled cancellationToken (checked
        /// between layers on the CPU, before each pass on a GPU) throws OperationCanceledException
        /// and leaves the session as before.</summary>
        public void Eval(int[] tokens, CancellationToken cancellationToken = default(CancellationToken))
        {
            if (tokens == null) throw new ArgumentNullException("tokens");
            cancellationToken.ThrowIfCancellationRequested();
            Gpt2Native.gpt2_error err;
            gpt2_result result;
            CancellationToken outer = callCancellation;
            callCancellation = cancellationToken;
            IntPtr session = lease.Enter();
            try
            {
                result = Gpt2Native.gpt2_session_eval(session, tokens, (UIntPtr)tokens.Length, out err);
            }
            finally
            {
                lease.Exit();
                callCancellation = outer;
            }
            abort.RethrowFailure();
            ThrowIfDisposedDuring(result);
            ThrowIfCancelled(result, cancellationToken);
            Gpt2Exception.ThrowIfFailed(result, ref err);
        }

        /// <summary>Appends text to the context and runs the model over it without generating
        /// (gpt2_session_eval_text): a persona, a scene, the player's line before the answer is
        /// asked for. Cancellation as in Eval(int[]); an empty text throws Gpt2Exception.</summary>
        public void Eval(string text, CancellationToken cancellationToken = default(CancellationToken))
        {
            if (text == null) throw new ArgumentNullException("text");
            cancellationToken.ThrowIfCancellationRequested();
            Gpt2Native.gpt2_error err;
            gpt2_result result;
            CancellationToken outer = callCancellation;
            callCancellation = cancellationToken;
            IntPtr session = lease.Enter();
            try
            {
                result = Gpt2Native.gpt2_session_eval_text(session, Gpt2Native.Utf8z(text), out err);
            }
            finally
            {
                lease.Exit();
                callCancellation = outer;
            }
            abort.RethrowFailure();
            ThrowIfDisposedDuring(result);
            ThrowIfCancelled(result, cancellationToken);
            Gpt2Exception.ThrowIfFailed(result, ref err);
        }

        // A call that Dispose stopped (its abort poll said so) throws ObjectDisposedException.
        void ThrowIfDisposedDuring(gpt2_result result)
        {
            if (result == gpt2_result.GPT2_ERROR_ABORTED && abort.Disposed)
                throw new ObjectDisposedException("Gpt2Session", "the session was disposed during the call, which stopped there");
        }

        static void ThrowIfCancelled(gpt2_result result, CancellationToken cancellationToken)
        {
            if (result == gpt2_result.GPT2_ERROR_ABORTED && cancellationToken.IsCancellationRequested)
                throw new OperationCanceledException("cancelled; the session is as it was before the call", cancellationToken);
        }

        /// <summary>Scores each option as a continuation of the context (gpt2_choose): the index of the
        /// most likely (a tie: the lower), and each option's log-probability, the sum over its tokens.
        /// The session is left as it was. Where the longest option does not fit after a full context,
        /// the options are scored after the context cut as its context policy would cut it.</summary>
        public Gpt2Choice Choose(params string[] options)
        {
            if (options == null) throw new ArgumentNullException("options");
            IntPtr session = lease.Enter();
            try
            {
                return ChooseHeld(session, options, default(CancellationToken));
            }
            finally
            {
                lease.Exit();
            }
        }

        /// <summary>Choose on a thread-pool thread, for a caller that must not wait (a game's main
        /// thread): the task's result is what Choose gives. Cancelling cancellationToken before the
        /// task ends (checked between layers on the CPU) ends it Canceled, the session as it was.
        /// The task holds the session from now on, as GenerateAsync's does.</summary>
        public Task<Gpt2Choice> ChooseAsync(string[] options, CancellationToken cancellationToken = default(CancellationToken))
        {
            if (options == null) throw new ArgumentNullException("options");
            var copy = (string[])options.Clone();
            IntPtr session = lease.Enter();
            Task<Gpt2Choice> task = Task.Run(() => ChooseHeld(session, copy, cancellationToken), cancellationToken);
            task.ContinueWith(ended => lease.Exit(), TaskScheduler.Default); // also when cancelled before it starts
            return task;
        }

        // Choose with the session held by the caller.
        Gpt2Choice ChooseHeld(IntPtr session, string[] options, CancellationToken cancellationToken)
        {
            cancellationToken.ThrowIfCancellationRequested();
            var pointers = new IntPtr[options.Length];
            var logprobs = new float[options.Length];
            UIntPtr best;
            Gpt2Native.gpt2_error err;
            gpt2_result result;
            CancellationToken outer = callCancellation;
            callCancellation = cancellationToken;
            try
            {
                for (int i = 0; i < options.Length; i++)
                {
                    if (options[i] == null) throw new ArgumentNullException("options", "options[" + i + "] is null");
                    byte[] bytes = Gpt2Native.Utf8z(options[i]);
                    pointers[i] = Marshal.AllocHGlobal(bytes.Length);
                    Marshal.Copy(bytes, 0, pointers[i], bytes.Length);
                }
                result = Gpt2Native.gpt2_choose(session, pointers, (UIntPtr)options.Length, logprobs, out best, out err);
            }
            finally
            {
                callCancellation = outer;
                foreach (IntPtr p in pointers)
                    if (p != IntPtr.Zero) Marshal.FreeHGlobal(p);
            }
            abort.RethrowFailure();
            ThrowIfDisposedDuring(result);
            ThrowIfCancelled(result, cancellationToken);
            Gpt2Exception.ThrowIfFailed(result, ref err);
            return new Gpt2Choice((int)best, options[(int)best], logprobs);
        }

        /// <summary>A copy of the n_vocab logits after the last evaluated token; null before any.</summary>
        public float[] Logits
        {
            get
            {
                return Held(session => {
                    IntPtr logits = Gpt2Native.gpt2_session_logits(session);
                    if (logits == IntPtr.Zero) return null;
                    float[] copy = new float[nVocab];
                    Marshal.Copy(logits, copy, 0, copy.Length);
                    return copy;
                });
            }
        }

        /// <summary>Appends prompt to the context and generates (gpt2_generate_text). onToken (may be
        /// null) receives each token's text as soon as it is certain, on this thread; returns all the
        /// generated text. A cancelled cancellationToken (checked between layers on the CPU, before
        /// each pass on a GPU) throws OperationCanceledException and leaves the session as it was
        /// before the call.</summary>
        public string Generate(string prompt, Gpt2GenerateOptions options = null, Gpt2TokenHandler onToken = null,
                               CancellationToken cancellationToken = default(CancellationToken))
        {
            if (prompt == null) throw new ArgumentNullException("prompt");
            cancellationToken.ThrowIfCancellationRequested();
            IntPtr session = lease.Enter();
            try
            {
                using (var p = new GenerateCallParams(options, onToken))
                    return GenerateHeld(session, prompt, p, cancellationToken);
            }
            finally
            {
                lease.Exit();
            }
        }

        // Generate with the session and the params' grammar held by the caller.
        string GenerateHeld(IntPtr session, string prompt, GenerateCallParams p, CancellationToken cancellationToken)
        {
            cancellationToken.ThrowIfCancellationRequested();
            gpt2_result result;
            Gpt2Native.gpt2_error err;
            CancellationToken outer = callCancellation;
            callCancellation = cancellationToken;
            try
            {
                result = Gpt2Native.gpt2_generate_text(session, Gpt2Native.Utf8z(prompt), ref p.Native, out err);
            }
            finally
            {
                callCancellation = outer;
            }
            NoteEnd(p, result);
            abort.RethrowFailure();
            if (p.Call.Failure != null) p.Call.Failure.Throw();
            ThrowIfDisposedDuring(result);
            ThrowIfCancelled(result, cancellationToken);
            Gpt2Exception.ThrowIfFailed(result, ref err);
            return p.Call.Text.ToString();
        }

        /// <summary>Generate without waiting, for a caller that must not (a game's main thread): the
        /// line joins its model's own stage (Gpt2Model.StageThreads; a thread of the stage's steps it),
        /// so the lines of every character asked meanwhile share one pass over the weights per token,
        /// each joining at the next step. The task's result is the text Generate gives. tokens (may be
        /// null) receives each piece as it is made, for the main thread to take in Update
        /// (Gpt2TokenQueue.TryDequeue). Cancelling cancellationToken before the line ends ends the task
        /// Canceled and leaves the session as before the call. The options are copied now: change them
        /// freely afterwards. Until the task ends, other calls on this session throw Gpt2Result.Busy.
        /// The task holds the session and the options' grammar from now on: disposing either before it
        /// ends stops it (ObjectDisposedException for the session; a grammar is freed after the task).
        /// A failure of the generation (a busy session included) ends the task with a Gpt2Exception.
        ///     var queue = new Gpt2TokenQueue();
        ///     Task&lt;string&gt; line = session.GenerateAsync("ROMEO:", options, queue, cts.Token);
        ///     // in Update: string piece; while (queue.TryDequeue(out piece)) label.text += piece;
        /// </summary>
        public Task<string> GenerateAsync(string prompt, Gpt2GenerateOptions options = null, Gpt2TokenQueue tokens = null,
                                          CancellationToken cancellationToken = default(CancellationToken))
        {
            if (prompt == null) throw new ArgumentNullException("prompt");
            lease.Peek(); // a disposed session throws now
            return model.GenerateOnOwnStage(this, prompt, options, tokens, cancellationToken);
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
            IntPtr[] handles = EnterAll(sessions);
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
                ExitAll(sessions);
                foreach (GCHandle pin in pins)
                    if (pin.IsAllocated) pin.Free();
            }
            if (n > 0) sessions[0].abort.RethrowFailure();
            foreach (Gpt2Session session in sessions) session.ThrowIfDisposedDuring(result);
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
            IntPtr[] handles = EnterAll(sessions);
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
                ExitAll(sessions);
                foreach (GenerateCallParams call in calls)
                    if (call != null) call.Dispose();
                foreach (IntPtr prompt in promptPointers)
                    if (prompt != IntPtr.Zero) Marshal.FreeHGlobal(prompt);
            }
            for (int i = 0; i < n; i++) sessions[i].NoteEnd(calls[i], result);
            foreach (Gpt2Session session in sessions) session.abort.RethrowFailure();
            foreach (Gpt2Session session in sessions) session.ThrowIfDisposedDuring(result);
            var texts = new string[n];
            for (int i = 0; i < n; i++)
            {
                if (calls[i].Call.Failure != null) calls[i].Call.Failure.Throw();
                texts[i] = calls[i].Call.Text.ToString();
            }
            Gpt2Exception.ThrowIfFailed(result, ref err);
            return texts;
        }

        // Every session held for one batch call (ExitAll lets them go); none is held if one throws.
        static IntPtr[] EnterAll(Gpt2Session[] sessions)
        {
            var handles = new IntPtr[sessions.Length];
            int held = 0;
            try
            {
                for (; held < sessions.Length; held++)
                {
                    if (sessions[held] == null) throw new ArgumentNullException("sessions[" + held + "]");
                    handles[held] = sessions[held].lease.Enter();
                }
            }
            catch
            {
                for (int i = 0; i < held; i++) sessions[i].lease.Exit();
                throw;
            }
            return handles;
        }

        static void ExitAll(Gpt2Session[] sessions)
        {
            foreach (Gpt2Session session in sessions) session.lease.Exit();
        }

        /// <summary>Frees the session (and its model, when the model was disposed before it). During a
        /// call on it (a GenerateAsync's task, a batch, Choose, on another thread) it stops the call at
        /// its next poll (between layers on the CPU), the call throws ObjectDisposedException, and the
        /// session is freed when the call has ended. Its members throw ObjectDisposedException from
        /// now on.</summary>
        public void Dispose()
        {
            abort.Disposed = true; // before the lease: a call that holds the session stops at its next poll
            lease.Dispose();
        }

        void FreeNative(IntPtr handle)
        {
            Gpt2Native.gpt2_session_free(handle);
            if (abortHandle.IsAllocated) abortHandle.Free();
            model.Release();
        }

        // A line of this session on a stage (Gpt2Stage.Add), from its add until Finish: it holds the
        // session and the options' grammar, and keeps its params (stop strings, the callbacks' target)
        // alive for the library until its on_end has come.
        internal sealed class StageLine
        {
            internal readonly Gpt2Session Session;
            internal readonly IntPtr NativeSession;
            readonly GenerateCallParams p;
            readonly CancellationToken cancellation;
            readonly TaskCompletionSource<string> done = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
            gpt2_result result;
            string message = "";
            // guarded by the stage's gate:
            internal bool Added;     // gpt2_stage_add succeeded
            internal bool Finishing; // its on_end has come: the library is done with it
            internal volatile bool CancelRequested;
            internal CancellationTokenRegistration Registration;

            internal StageLine(Gpt2Stage stage, Gpt2Session session, Gpt2GenerateOptions options, Gpt2TokenQueue tokens, CancellationToken cancellation)
            {
                Session = session;
                this.cancellation = cancellation;
                NativeSession = session.lease.Enter();
                try
                {
                    p = new GenerateCallParams(options == null ? null : options.Copy(), tokens == null ? null : new Gpt2TokenHandler(tokens.Add));
                }
                catch
                {
                    session.lease.Exit();
                    throw;
                }
                p.Call.OnEnd = (ended, why) => {
                    result = ended;
                    message = why;
                    stage.NoteEnded(this);
                };
                p.Native.on_end = EndThunkPointer;
            }

            internal Task<string> Task { get { return done.Task; } }

            internal gpt2_result Add(IntPtr nativeStage, string prompt, out Gpt2Native.gpt2_error err)
            {
                return Gpt2Native.gpt2_stage_add(nativeStage, NativeSession, Gpt2Native.Utf8z(prompt), ref p.Native, out err);
            }

            // The line left, or was never added (a refused add: `refused` its error): the session's
            // LastEnd, the holds let go, and the task's outcome. `stageDisposed`: the stage went first.
            internal void Finish(bool stageDisposed, Exception refused = null)
            {
                Registration.Dispose();
                Session.NoteEnd(p, result);
                GenerateCall call = p.Call;
                p.Dispose();
                ExceptionDispatchInfo shouldAbortFailure = Session.abort.Failure;
                Session.abort.Failure = null;
                bool sessionDisposed = Session.abort.Disposed;
                Session.lease.Exit();
                if (refused != null) done.TrySetException(refused);
                else if (shouldAbortFailure != null) done.TrySetException(shouldAbortFailure.SourceException);
                else if (call.Failure != null) done.TrySetException(call.Failure.SourceException);
                else if (result == gpt2_result.GPT2_OK) done.TrySetResult(call.Text.ToString());
                else if (result != gpt2_result.GPT2_ERROR_ABORTED) done.TrySetException(new Gpt2Exception((Gpt2Result)result, message));
                else if (sessionDisposed) done.TrySetException(new ObjectDisposedException("Gpt2Session", "the session was disposed during the call, which stopped there"));
                else if (CancelRequested) done.TrySetCanceled(cancellation);
                else if (stageDisposed) done.TrySetException(new ObjectDisposedException("Gpt2Stage", "the stage was disposed before the line ended; its session is as before the line"));
                else done.TrySetException(new Gpt2Exception(Gpt2Result.Aborted, message)); // ShouldAbort said so
            }
        }

        static readonly Gpt2Native.gpt2_end_fn EndThunk = OnEnd;
        static readonly IntPtr EndThunkPointer = Marshal.GetFunctionPointerForDelegate(EndThunk);

        [MonoPInvokeCallback(typeof(Gpt2Native.gpt2_end_fn))]
        static void OnEnd(IntPtr user, int end, gpt2_result result, IntPtr message)
        {
            try
            {
                var call = (GenerateCall)GCHandle.FromIntPtr(user).Target;
                if (call.OnEnd != null) call.OnEnd(result, Gpt2Native.FromUtf8z(message));
            }
            catch (Exception)
            {
                // nothing may unwind through native code; the line's task still ends at Finish
            }
        }

        // What OnAbort needs: the caller's predicate, an exception it threw, to rethrow, and whether
        // the session was disposed during the call.
        sealed class AbortState
        {
            public Func<bool> ShouldAbort;
            public ExceptionDispatchInfo Failure;
            public volatile bool Disposed;

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
            Gpt2Grammar grammar; // held until Dispose
            IntPtr ends; // the call's gpt2_end, then its gpt2_match: two ints the library writes
            readonly bool hasGrammar;

            Gpt2End endAfter;       // what `ends` held at Dispose
            gpt2_match matchAfter;

            public Gpt2End End { get { return ends != IntPtr.Zero ? (Gpt2End)Marshal.ReadInt32(ends) : endAfter; } }
            public bool Complete
            {
                get
                {
                    gpt2_match match = ends != IntPtr.Zero ? (gpt2_match)Marshal.ReadInt32(ends, 4) : matchAfter;
                    return !hasGrammar || match == gpt2_match.GPT2_MATCH_COMPLETE;
                }
            }

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
                    if (options.Grammar != null)
                    {
                        Native.grammar = options.Grammar.Acquire();
                        grammar = options.Grammar;
                        hasGrammar = true;
                    }
                    ends = Marshal.AllocHGlobal(8);
                    Marshal.WriteInt32(ends, 0);
                    Marshal.WriteInt32(ends, 4, 0);
                    Native.end = ends;
                    Native.grammar_match = ends + 4;
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
                if (grammar != null) grammar.Release();
                grammar = null;
                if (ends != IntPtr.Zero)
                {
                    endAfter = (Gpt2End)Marshal.ReadInt32(ends);
                    matchAfter = (gpt2_match)Marshal.ReadInt32(ends, 4);
                    Marshal.FreeHGlobal(ends);
                }
                ends = IntPtr.Zero;
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
            public Action<gpt2_result, string> OnEnd; // a stage's line: its on_end

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
            if (callCancellation.IsCancellationRequested) return 1;
            var state = (AbortState)GCHandle.FromIntPtr(user).Target;
            if (state.Failure != null || state.Disposed) return 1;
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

    /// <summary>Many characters' lines in one pass over the weights per token (gpt2_stage,
    /// docs/STAGE.md). Add joins a session's line to the next step, at any time and from any thread;
    /// Step advances every line on the stage by one token, or with budgetMicroseconds &gt; 0 by at
    /// most about that much work (the next Step goes on where it stopped: call it once a frame, in
    /// Update, on a host without a spare thread). Each line's task ends with the text Generate gives
    /// its session alone, and the session is free again. Gpt2Session.GenerateAsync uses its model's
    /// own stage, which a thread of its own steps; make a Gpt2Stage to step one yourself.
    ///     var stage = new Gpt2Stage(model, threads: 1);
    ///     Task&lt;string&gt; guard = stage.Add(guardSession, "PLAYER: Who goes there?\nGUARD:", options, guardPieces);
    ///     // every frame: stage.Step(4000);   // at most ~4 ms of work
    /// Disposing the stage ends the lines still on it (their tasks: ObjectDisposedException; their
    /// sessions as before their lines).</summary>
    public sealed class Gpt2Stage : IDisposable
    {
        readonly Gpt2Model model;
        readonly NativeLease lease; // held by each call into the native stage; Dispose frees it after the last
        readonly object gate = new object();
        readonly List<Gpt2Session.StageLine> lines = new List<Gpt2Session.StageLine>(); // added, not yet finished
        readonly List<Gpt2Session.StageLine> ended = new List<Gpt2Session.StageLine>(); // their on_end came: Finish them
        volatile bool disposed;
        AutoResetEvent wake; // the model's own stage: its thread waits here for lines

        /// <summary>A stage for sessions of model; threads: the threads of its passes (0: one per core).</summary>
        public Gpt2Stage(Gpt2Model model, int threads = 0) : this(model, threads, false) { }

        Gpt2Stage(Gpt2Model model, int threads, bool modelsOwn)
        {
            if (model == null) throw new ArgumentNullException("model");
            if (threads < 0) throw new ArgumentOutOfRangeException("threads", threads, "0 (one per core) or more");
            this.model = model;
            lease = new NativeLease("Gpt2Stage", FreeNative);
            IntPtr modelHandle = modelsOwn ? model.AcquireHeld() : model.Acquire();
            Gpt2Native.gpt2_stage_params p = Gpt2Native.gpt2_stage_default_params();
            p.n_threads = threads;
            Gpt2Native.gpt2_error err;
            IntPtr handle;
            gpt2_result result = Gpt2Native.gpt2_stage_create(modelHandle, ref p, out handle, out err);
            lease.Set(handle);
            if (result != gpt2_result.GPT2_OK) model.Release();
            Gpt2Exception.ThrowIfFailed(result, ref err);
        }

        // The model's own stage (GenerateAsync's): a background thread steps it while it has lines.
        internal static Gpt2Stage SteppedByItsOwnThread(Gpt2Model model, int threads)
        {
            var stage = new Gpt2Stage(model, threads, true);
            stage.wake = new AutoResetEvent(false);
            var stepper = new Thread(stage.StepWhileItHasLines);
            stepper.IsBackground = true;
            stepper.Name = "gpt2 stage";
            stepper.Start();
            return stage;
        }

        void StepWhileItHasLines()
        {
            for (;;)
            {
                while (Active > 0)
                {
                    try
                    {
                        Step();
                    }
                    catch (Exception)
                    {
                        // a step's failure is its lines' (their tasks end with it); go on with the others
                    }
                }
                if (model.CloseOwnStageIfIdle(this)) break;
                wake.WaitOne();
            }
            Dispose();
        }

        internal void Wake()
        {
            if (wake != null) wake.Set();
        }

        /// <summary>The lines on the stage: added and not yet ended.</summary>
        public int Active { get { lock (gate) return lines.Count; } }

        /// <summary>Queues session's line (gpt2_stage_add): prompt (may be "": continue the context) and
        /// options (null: the defaults; copied now) as Generate takes them, tokens (may be null) its
        /// pieces as they are made. It joins the next step; the task ends with its text. Until then the
        /// line holds the session (other calls on it throw Gpt2Result.Busy) and the options' grammar.
        /// cancellationToken cancels the line (the task Canceled, the session as before the line). A
        /// line the library refuses (a busy session, a session of another model or already on this
        /// stage, an empty prompt on an empty session) ends the task with a Gpt2Exception.</summary>
        public Task<string> Add(Gpt2Session session, string prompt, Gpt2GenerateOptions options = null, Gpt2TokenQueue tokens = null,
                                CancellationToken cancellationToken = default(CancellationToken))
        {
            if (session == null) throw new ArgumentNullException("session");
            if (prompt == null) throw new ArgumentNullException("prompt");
            if (cancellationToken.IsCancellationRequested)
            {
                var cancelled = new TaskCompletionSource<string>();
                cancelled.SetCanceled();
                return cancelled.Task;
            }
            IntPtr stage = lease.Enter();
            Gpt2Session.StageLine line;
            gpt2_result result;
            Gpt2Native.gpt2_error err;
            try
            {
                line = new Gpt2Session.StageLine(this, session, options, tokens, cancellationToken);
                lock (gate) lines.Add(line); // before the add: its on_end may come before Add returns
                line.Registration = cancellationToken.Register(() => Cancel(line));
                result = line.Add(stage, prompt, out err);
                lock (gate) line.Added = result == gpt2_result.GPT2_OK;
            }
            finally
            {
                lease.Exit();
            }
            if (result != gpt2_result.GPT2_OK)
            {
                lock (gate) lines.Remove(line);
                string message = err.Message.Length > 0 ? err.Message : Gpt2Native.FromUtf8z(Gpt2Native.gpt2_result_string(result));
                line.Finish(false, new Gpt2Exception((Gpt2Result)result, message));
                return line.Task;
            }
            if (line.CancelRequested) Cancel(line); // cancelled while it was being added
            Wake();
            return line.Task;
        }

        /// <summary>Advances every line by one token in one pass over the weights (gpt2_stage_step), a
        /// new line's prompt prefilled in the same pass; with budgetMicroseconds &gt; 0 it returns once
        /// about that much work is done, and the next Step goes on where it stopped (the tokens are
        /// the same, bit for bit). Lines that end leave, their tasks end. Returns the lines still on
        /// the stage. A line's failure ends its task, not Step; one thread steps at a time (another
        /// gets Gpt2Exception with Gpt2Result.Busy).</summary>
        public int Step(long budgetMicroseconds = 0)
        {
            if (budgetMicroseconds < 0) throw new ArgumentOutOfRangeException("budgetMicroseconds", budgetMicroseconds, "0 (a whole step) or more");
            IntPtr stage = lease.Enter();
            gpt2_result result;
            Gpt2Native.gpt2_error err;
            try
            {
                UIntPtr ignored;
                result = Gpt2Native.gpt2_stage_step(stage, budgetMicroseconds, out ignored, out err);
            }
            finally
            {
                lease.Exit();
                FinishEnded();
            }
            if (result == gpt2_result.GPT2_ERROR_BUSY) Gpt2Exception.ThrowIfFailed(result, ref err);
            return Active;
        }

        /// <summary>Ends session's line now (gpt2_stage_cancel): its task ends Canceled and the session
        /// is as before the line. Nothing when the session has no line on this stage.</summary>
        public void Cancel(Gpt2Session session)
        {
            if (session == null) throw new ArgumentNullException("session");
            Gpt2Session.StageLine line;
            lock (gate) line = lines.Find(l => l.Session == session);
            if (line != null) Cancel(line);
        }

        void Cancel(Gpt2Session.StageLine line)
        {
            line.CancelRequested = true;
            if (disposed) return; // the stage is going: its lines end with it
            IntPtr stage;
            try
            {
                stage = lease.Enter();
            }
            catch (ObjectDisposedException)
            {
                return;
            }
            try
            {
                lock (gate) // the line is not finished meanwhile: its native session stays valid
                {
                    if (!line.Added || line.Finishing) return;
                    Gpt2Native.gpt2_error err;
                    Gpt2Native.gpt2_stage_cancel(stage, line.NativeSession, out err); // not on the stage: it has just ended
                }
            }
            finally
            {
                lease.Exit();
                FinishEnded();
            }
        }

        // on_end, on the thread of the native call that ended the line.
        internal void NoteEnded(Gpt2Session.StageLine line)
        {
            lock (gate)
            {
                line.Finishing = true;
                ended.Add(line);
            }
        }

        // The lines whose on_end came, finished outside the native calls.
        void FinishEnded()
        {
            Gpt2Session.StageLine[] finished;
            lock (gate)
            {
                if (ended.Count == 0) return;
                finished = ended.ToArray();
                ended.Clear();
                foreach (Gpt2Session.StageLine line in finished) lines.Remove(line);
            }
            foreach (Gpt2Session.StageLine line in finished) line.Finish(disposed);
        }

        /// <summary>Frees the stage, once a Step or Add running on another thread has returned; the
        /// lines still on it end (their tasks: ObjectDisposedException) and their sessions are as
        /// before their lines.</summary>
        public void Dispose()
        {
            disposed = true;
            lease.Dispose();
        }

        void FreeNative(IntPtr handle)
        {
            Gpt2Native.gpt2_stage_free(handle);
            FinishEnded();
            model.Release();
        }
    }
}
