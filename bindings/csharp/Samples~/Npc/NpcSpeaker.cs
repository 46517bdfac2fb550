// NpcSpeaker.cs - a character that answers the player: its answer streams into a UI Text as it
// is generated (on the model's own stage, whose thread steps every speaker's line in one pass per
// token), and stops when the character goes away (a scene change).
// Put it on a GameObject, set `line` to a Text, put the model under StreamingAssets and call
// Ask("...") from a button or a dialogue system. Every speaker shares one model.
using System.IO;
using System.Threading;
using System.Threading.Tasks;
using Gpt2;
using UnityEngine;
using UnityEngine.UI;

public class NpcSpeaker : MonoBehaviour
{
    [SerializeField] string modelFile = "npc.gguf";                   // under StreamingAssets
    [SerializeField] string persona = "The guard stands at the gate.\n"; // evaluated once, kept in the context
    [SerializeField] string speaker = "GUARD";
    [SerializeField] Text line;                                        // where the answer appears
    [SerializeField] int maxNewTokens = 60;

    static Gpt2Model model; // one for every speaker: immutable, shared between threads
    Gpt2Session session;
    readonly Gpt2TokenQueue pieces = new Gpt2TokenQueue();
    readonly CancellationTokenSource leaving = new CancellationTokenSource();
    Task<string> answering;

    void Start()
    {
        if (model == null)
        {
            model = new Gpt2Model(Path.Combine(Application.streamingAssetsPath, modelFile));
            model.StageThreads = 1; // the stage's passes on one thread: the game keeps the others
        }
        // Discard keeps long conversations fast, the persona kept (Threads: its own calls, Eval here).
        session = new Gpt2Session(model, new Gpt2SessionOptions { Threads = 1, ContextPolicy = Gpt2ContextPolicy.Discard });
        session.Eval(persona);
    }

    /// <summary>The player says playerLine; the character's answer streams into `line`.</summary>
    public void Ask(string playerLine)
    {
        if (answering != null && !answering.IsCompleted) return; // still answering: the session takes one call at a time
        line.text = "";
        var options = new Gpt2GenerateOptions { MaxNewTokens = maxNewTokens, Stop = new[] { "\nPLAYER:" } };
        answering = session.GenerateAsync("PLAYER: " + playerLine + "\n" + speaker + ":", options, pieces, leaving.Token);
    }

    void Update()
    {
        string piece;
        while (pieces.TryDequeue(out piece)) line.text += piece;
        if (answering != null && answering.IsFaulted)
        {
            Debug.LogError(answering.Exception);
            answering = null;
        }
    }

    void OnDestroy()
    {
        leaving.Cancel();  // the answer under way stops between two layers
        session.Dispose(); // safe while its task still runs: the session is freed when the task ends
    }
}
