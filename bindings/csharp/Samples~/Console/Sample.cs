// Sample.cs - the C# binding's console sample: loads a model, generates 100 tokens with seed 7
// from "ROMEO:" and streams them to stdout. It prints what tests/shared/sample.c prints (CTest
// csharp_sample_same_text_as_c checks that).
//     mcs -out:Sample.exe ../../Gpt2Native.cs ../../Gpt2.cs Sample.cs
//     LD_LIBRARY_PATH=path/to/libgpt2.so's/folder mono Sample.exe models/shakespeare_char_medium.gguf
using System;
using System.IO;
using System.Text;
using Gpt2;

static class Sample
{
    static int Main(string[] args)
    {
        if (args.Length < 1)
        {
            Console.Error.WriteLine("usage: Sample.exe MODEL.gguf");
            return 2;
        }
        // UTF-8 and "\n" whatever the console's locale and platform, like the C sample.
        var stdout = new StreamWriter(Console.OpenStandardOutput(), new UTF8Encoding(false));
        stdout.AutoFlush = true;
        stdout.NewLine = "\n";
        try
        {
            using (var model = new Gpt2Model(args[0]))
            using (var session = new Gpt2Session(model))
            {
                var options = new Gpt2GenerateOptions { MaxNewTokens = 100, Seed = 7 };
                const string prompt = "ROMEO:";
                stdout.Write(prompt);
                session.Generate(prompt, options, (token, text) => { stdout.Write(text); return true; });
                stdout.WriteLine();
            }
            return 0;
        }
        catch (Gpt2Exception e)
        {
            Console.Error.WriteLine("{0} ({1})", e.Message, e.Code);
            return 1;
        }
    }
}
