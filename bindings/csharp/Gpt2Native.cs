// Gpt2Native.cs - P/Invoke declarations of gpt2.h's C API (src/api.h), one to one: the same
// names, the structs field by field in the same order. Every struct here is blittable; sizes
// are those of the platform's C ABI (int and enums 4 bytes, pointers and size_t as IntPtr and
// UIntPtr), which Gpt2Library.CheckAbi (Gpt2.cs) compares with the library's at load.
// Strings go in as NUL-terminated UTF-8 byte arrays (Gpt2Native.Utf8z) and come out as IntPtr,
// never as `string` returns, which the marshaller would try to free.
using System;
using System.Runtime.InteropServices;
using System.Text;

namespace Gpt2
{
    public enum gpt2_result
    {
        GPT2_OK = 0,
        GPT2_ERROR_INVALID_ARGUMENT,
        GPT2_ERROR_IO,
        GPT2_ERROR_BAD_FILE,
        GPT2_ERROR_UNSUPPORTED,
        GPT2_ERROR_OUT_OF_MEMORY,
        GPT2_ERROR_BAD_TOKEN,
        GPT2_ERROR_CONTEXT_FULL,
        GPT2_ERROR_NO_VOCABULARY,
        GPT2_ERROR_BAD_TEXT,
        GPT2_ERROR_DEVICE,
        GPT2_ERROR_ABORTED,
        GPT2_ERROR_INTERNAL,
        GPT2_ERROR_BUSY,
        GPT2_ERROR_BAD_GRAMMAR
    }

    public enum gpt2_match { GPT2_MATCH_NONE = 0, GPT2_MATCH_PREFIX = 1, GPT2_MATCH_COMPLETE = 2 }

    public enum gpt2_log_level { GPT2_LOG_ERROR, GPT2_LOG_WARNING, GPT2_LOG_INFO, GPT2_LOG_DEBUG }
    public enum gpt2_type { GPT2_TYPE_F32 = 0, GPT2_TYPE_F16 = 1, GPT2_TYPE_Q4_0 = 2, GPT2_TYPE_Q8_0 = 8, GPT2_TYPE_BF16 = 30 }
    public enum gpt2_device { GPT2_DEVICE_CPU = 0, GPT2_DEVICE_CUDA = 1 }
    public enum gpt2_tokenizer_kind { GPT2_TOKENIZER_NONE = 0, GPT2_TOKENIZER_CHAR, GPT2_TOKENIZER_BPE }
    public enum gpt2_context_policy { GPT2_CONTEXT_EXACT = 0, GPT2_CONTEXT_DISCARD = 1 }

    public static class Gpt2Native
    {
        // The version of api.h these declarations mirror (GPT2_VERSION).
        public const int GPT2_VERSION_MAJOR = 0;
        public const int GPT2_VERSION_MINOR = 3;
        public const int GPT2_VERSION_PATCH = 0;
        public const int GPT2_VERSION = GPT2_VERSION_MAJOR * 10000 + GPT2_VERSION_MINOR * 100 + GPT2_VERSION_PATCH;

        // libgpt2.so, gpt2.dll, libgpt2.dylib; linked statically where plugins must be (iOS, WebGL).
#if (UNITY_IOS || UNITY_WEBGL) && !UNITY_EDITOR
        public const string Library = "__Internal";
#else
        public const string Library = "gpt2";
#endif

        // ---- Callbacks: pass Marshal.GetFunctionPointerForDelegate of a static method (IL2CPP) ----
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate void gpt2_log_fn(IntPtr user, gpt2_log_level level, IntPtr message);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int gpt2_abort_fn(IntPtr user);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int gpt2_token_fn(IntPtr user, int token, IntPtr text, UIntPtr text_len);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate void gpt2_logits_fn(IntPtr user, IntPtr logits, int n_vocab);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate void gpt2_end_fn(IntPtr user, int end, gpt2_result result, IntPtr message);

        // ---- Structs ----
        [StructLayout(LayoutKind.Sequential)]
        public struct gpt2_error
        {
            public gpt2_result code;
            [MarshalAs(UnmanagedType.ByValArray, SizeConst = 512)]
            public byte[] message;

            public string Message
            {
                get
                {
                    if (message == null) return "";
                    int n = Array.IndexOf(message, (byte)0);
                    return Encoding.UTF8.GetString(message, 0, n < 0 ? message.Length : n);
                }
            }
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct gpt2_model_params
        {
            public int no_mmap;
            public gpt2_device device;
            public int cuda_device_index;
            public IntPtr log;      // gpt2_log_fn
            public IntPtr log_user;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct gpt2_model_info
        {
            public IntPtr name;     // const char*, owned by the model
            public int n_vocab;
            public int n_vocab_rows;
            public int n_ctx;
            public int n_embd;
            public int n_layer;
            public int n_head;
            public gpt2_type weight_type;
            public gpt2_tokenizer_kind tokenizer;
            public int eos_token;
            public UIntPtr weight_bytes;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct gpt2_session_params
        {
            public int n_threads;
            public int n_ctx;
            public int kv_f16;
            public gpt2_context_policy context_policy;
            public int n_keep;
            public int n_discard;
            public IntPtr abort_fn; // gpt2_abort_fn
            public IntPtr abort_user;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct gpt2_logit_bias
        {
            public int token;
            public float bias;
        }

        [StructLayout(LayoutKind.Sequential)]
        public struct gpt2_generate_params
        {
            public int max_new_tokens;
            public float temperature;
            public int top_k;
            public ulong seed;
            public IntPtr on_token;  // gpt2_token_fn
            public IntPtr user;
            public float top_p;
            public float min_p;
            public float repeat_penalty;
            public int repeat_last_n;
            public float presence_penalty;
            public float frequency_penalty;
            public IntPtr logit_bias; // const gpt2_logit_bias*
            public UIntPtr n_logit_bias;
            public IntPtr on_logits;  // gpt2_logits_fn
            public IntPtr stop;       // const char* const*
            public UIntPtr n_stop;
            public int stop_at_eos;
            public IntPtr grammar;       // const gpt2_grammar*
            public IntPtr grammar_match; // gpt2_match*
            public IntPtr end;           // gpt2_end*
            public IntPtr on_end;        // gpt2_end_fn
        }

        // ---- Version and ABI ----
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern IntPtr gpt2_result_string(gpt2_result result);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern int gpt2_version();
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern IntPtr gpt2_version_string();
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_check_abi(int version, UIntPtr model_params_size, UIntPtr session_params_size,
                                                        UIntPtr generate_params_size, UIntPtr model_info_size, out gpt2_error err);

        // ---- Model ----
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_model_params gpt2_model_default_params();
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_model_load_file(byte[] path, ref gpt2_model_params p, out IntPtr out_model, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_model_load_memory(IntPtr data, UIntPtr size, ref gpt2_model_params p, out IntPtr out_model, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void gpt2_model_free(IntPtr model);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_model_info gpt2_model_get_info(IntPtr model);

        // ---- Tokenizer ----
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_tokenize(IntPtr model, byte[] text, UIntPtr len, int allow_special,
                                                       int[] tokens, UIntPtr capacity, out UIntPtr n_tokens, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_detokenize(IntPtr model, int[] tokens, UIntPtr n_tokens,
                                                         byte[] text, UIntPtr capacity, out UIntPtr n_bytes, out gpt2_error err);

        // ---- Session ----
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_session_params gpt2_session_default_params();
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_session_create(IntPtr model, ref gpt2_session_params p, out IntPtr out_session, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void gpt2_session_free(IntPtr session);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void gpt2_session_reset(IntPtr session);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern UIntPtr gpt2_session_n_tokens(IntPtr session);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern IntPtr gpt2_session_tokens(IntPtr session); // const int32_t*, owned by the session
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_session_save(IntPtr session, byte[] buf, UIntPtr capacity, out UIntPtr n_bytes, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_session_load(IntPtr session, byte[] buf, UIntPtr n_bytes, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_session_copy(IntPtr dst, IntPtr src, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_session_truncate(IntPtr session, UIntPtr n_tokens, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_session_eval(IntPtr session, int[] tokens, UIntPtr n_tokens, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_session_eval_text(IntPtr session, byte[] text, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern IntPtr gpt2_session_logits(IntPtr session); // const float*, owned by the session
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_score(IntPtr session, int[] tokens, UIntPtr n_tokens, out double out_logprob_sum, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_choose(IntPtr session, IntPtr[] options, UIntPtr n_options, float[] logprobs, out UIntPtr best, out gpt2_error err);

        // ---- Grammars ----
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_grammar_from_gbnf(IntPtr model, byte[] gbnf, byte[] root, out IntPtr out_grammar, out gpt2_error err);
        [StructLayout(LayoutKind.Sequential)]
        public struct gpt2_json_schema_params
        {
            public int compact;
            public uint max_whitespace;
            public int any_order;
            public int integer_fraction;
        }
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_grammar_from_json_schema(IntPtr model, byte[] schema, UIntPtr len, ref gpt2_json_schema_params p, out IntPtr out_grammar, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void gpt2_grammar_free(IntPtr grammar);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_grammar_match(IntPtr grammar, byte[] text, UIntPtr len, out gpt2_match out_match, out gpt2_error err);

        // ---- Generation ----
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_generate_params gpt2_generate_default_params();
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_generate(IntPtr session, int[] prompt, UIntPtr n_prompt, ref gpt2_generate_params p,
                                                       int[] out_tokens, UIntPtr capacity, out UIntPtr n_generated, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_generate_text(IntPtr session, byte[] prompt, ref gpt2_generate_params p, out gpt2_error err);

        // ---- Many sessions in one pass ----
        // sessions: the sessions' handles; tokens[i]: a pointer to n_tokens[i] ids (pinned by the caller).
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_batch_eval(IntPtr[] sessions, IntPtr[] tokens, UIntPtr[] n_tokens, UIntPtr n_sessions,
                                                         out gpt2_error err);
        // prompts[i]: a NUL-terminated UTF-8 string or IntPtr.Zero (continue the context); p: one
        // gpt2_generate_params per session, or null for the defaults.
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_generate_batch(IntPtr[] sessions, IntPtr[] prompts, gpt2_generate_params[] p,
                                                             UIntPtr n_sessions, out gpt2_error err);

        // ---- The stage (many characters, one pass per token) ----
        [StructLayout(LayoutKind.Sequential)]
        public struct gpt2_stage_params
        {
            public int n_threads;
        }
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_stage_params gpt2_stage_default_params();
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_stage_create(IntPtr model, ref gpt2_stage_params p, out IntPtr out_stage, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern void gpt2_stage_free(IntPtr stage);
        // prompt: NUL-terminated UTF-8; p's pointers (stop strings, logit_bias, user) must stay valid
        // until the line's on_end.
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_stage_add(IntPtr stage, IntPtr session, byte[] prompt, ref gpt2_generate_params p, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_stage_cancel(IntPtr stage, IntPtr session, out gpt2_error err);
        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_stage_step(IntPtr stage, long budget_us, out UIntPtr n_active, out gpt2_error err);

        [DllImport(Library, CallingConvention = CallingConvention.Cdecl)]
        public static extern gpt2_result gpt2_sample(float[] logits, int n, float temperature, int top_k, ref ulong rng_state,
                                                     out int out_token, out gpt2_error err);

        // ---- Helpers ----
        /// <summary>UTF-8 bytes of s with a terminating NUL, for const char* arguments.</summary>
        public static byte[] Utf8z(string s)
        {
            byte[] bytes = new byte[Encoding.UTF8.GetByteCount(s) + 1];
            Encoding.UTF8.GetBytes(s, 0, s.Length, bytes, 0);
            return bytes;
        }

        /// <summary>The NUL-terminated UTF-8 string at p ("" for NULL).</summary>
        public static string FromUtf8z(IntPtr p)
        {
            if (p == IntPtr.Zero) return "";
            int n = 0;
            while (Marshal.ReadByte(p, n) != 0) n++;
            return FromUtf8(p, n);
        }

        /// <summary>n bytes of UTF-8 at p.</summary>
        public static string FromUtf8(IntPtr p, int n)
        {
            if (n == 0) return "";
            byte[] bytes = new byte[n];
            Marshal.Copy(p, bytes, 0, n);
            return Encoding.UTF8.GetString(bytes);
        }
    }
}
