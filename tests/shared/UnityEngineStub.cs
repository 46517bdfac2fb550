// UnityEngineStub.cs - a STUB of the few UnityEngine types the binding's Unity sample uses
// (bindings/csharp/Samples~/Npc), so that mcs can compile the sample where Unity is not installed.
// It behaves like nothing in Unity; it only lets the compiler check the sample's calls.
using System;

namespace UnityEngine
{
    public class MonoBehaviour { }

    [AttributeUsage(AttributeTargets.Field)]
    public sealed class SerializeField : Attribute { }

    public static class Application
    {
        public static string streamingAssetsPath { get { return "StreamingAssets"; } }
    }

    public static class Debug
    {
        public static void Log(object message) { Console.WriteLine(message); }
        public static void LogError(object message) { Console.Error.WriteLine(message); }
    }
}

namespace UnityEngine.UI
{
    public class Text
    {
        public string text { get; set; }
    }
}
