// A small line editor for the REPL, with no dependency beyond the OS.
//
// POSIX terminals: raw mode (termios) while a line is read, so keys are ours: left/right
// (Ctrl-B/F), Home/End (Ctrl-A/E), Backspace, Delete, Ctrl-U (clear), up/down (Ctrl-P/N) through
// the history; Ctrl-C returns Interrupted, Ctrl-D on an empty line returns EndOfInput. The
// cursor moves by whole UTF-8 characters; East Asian wide characters count two columns. A line
// longer than the terminal is wide wraps onto more rows, and each key redraws those rows in place
// (before, every key once the line wrapped printed the line again on a new row).
// Elsewhere (Windows, or stdin not a terminal): std::getline, with the console's own editing
// and history on Windows.
#pragma once
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#if !defined(_WIN32)
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>
#endif

enum class LineResult { Line, EndOfInput, Interrupted };

class LineEditor {
public:
    LineResult read(const char* prompt, std::string* line);
    void add_history(const std::string& line) {
        if (!line.empty() && (history_.empty() || history_.back() != line)) history_.push_back(line);
    }

private:
    std::vector<std::string> history_;
#if !defined(_WIN32)
    std::string prompt_, buf_;
    size_t pos_ = 0; // byte offset of the cursor in buf_, always at a character boundary
    size_t row_ = 0; // the cursor's row, counted from the prompt's row
    LineResult read_raw(std::string* line);
    int read_key();
    void refresh();
    int read_byte() {
        unsigned char c;
        return ::read(STDIN_FILENO, &c, 1) == 1 ? c : -1;
    }
#endif
};

// While it lives, keys typed on a POSIX terminal are not echoed (they wait, unread, for the next
// prompt) so that they do not land in the middle of streamed text. Ctrl-C still sends SIGINT.
class QuietInput {
public:
#if defined(_WIN32)
    QuietInput() {}
#else
    QuietInput() : active_(isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_) == 0) {
        if (!active_) return;
        termios quiet = saved_;
        quiet.c_lflag &= ~(tcflag_t)ECHO;
        tcsetattr(STDIN_FILENO, TCSANOW, &quiet);
    }
    ~QuietInput() {
        if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    }

private:
    bool active_;
    termios saved_;
#endif
};

#if !defined(_WIN32)
static bool le_continuation(unsigned char c) { return (c & 0xc0) == 0x80; }

// Columns a UTF-8 string takes on a terminal: 2 for East Asian wide characters and emoji,
// 0 for combining marks, 1 otherwise.
static size_t le_columns(const std::string& s, size_t from, size_t to) {
    size_t cols = 0;
    for (size_t i = from; i < to;) {
        unsigned char c = (unsigned char)s[i];
        size_t n = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
        uint32_t cp = n == 1 ? c : c & (0x7f >> n);
        for (size_t k = 1; k < n && i + k < to; k++) cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3f);
        i += n;
        if ((cp >= 0x300 && cp <= 0x36f) || cp == 0x200d || (cp >= 0xfe00 && cp <= 0xfe0f)) continue;
        bool wide = (cp >= 0x1100 && cp <= 0x115f) || (cp >= 0x2e80 && cp <= 0xa4cf) || (cp >= 0xac00 && cp <= 0xd7a3) ||
                    (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0xff00 && cp <= 0xff60) || (cp >= 0xffe0 && cp <= 0xffe6) ||
                    (cp >= 0x1f300 && cp <= 0x1faff) || (cp >= 0x20000 && cp <= 0x3fffd);
        cols += wide ? 2 : 1;
    }
    return cols;
}

// Where a terminal `width` columns wide puts the cursor after printing s[0, to) from column 0: a
// character that does not fit in what is left of a row starts the next. *col == width means the
// row is full and the cursor waits there (the next character goes to the next row).
static void le_place(const std::string& s, size_t to, size_t width, size_t* row, size_t* col) {
    *row = *col = 0;
    for (size_t i = 0; i < to;) {
        size_t n = 1;
        while (i + n < to && le_continuation((unsigned char)s[i + n])) n++;
        const size_t w = le_columns(s, i, i + n);
        if (*col + w > width) ++*row, *col = 0;
        *col += w;
        i += n;
    }
}

// The bytes that redraw `prompt` + `buf` with the cursor before buf[pos], on a terminal `width`
// columns wide where the cursor is on row *row of the text drawn last (0: the prompt's row). The
// text may take several rows: go up to the prompt's row, clear to the end of the screen, print,
// then move the cursor from the end of the text to pos. *row becomes the cursor's row.
static std::string le_redraw(const std::string& prompt, const std::string& buf, size_t pos, size_t width, size_t* row) {
    if (width < 2) width = 80;
    std::string out;
    if (*row) out += "\x1b[" + std::to_string(*row) + "A";
    const std::string text = prompt + buf;
    out += "\r\x1b[J" + text; // cleared first: at a full row's end, \x1b[J would erase its last character
    size_t end_row, end_col, cur_row, cur_col;
    le_place(text, text.size(), width, &end_row, &end_col);
    le_place(text, prompt.size() + pos, width, &cur_row, &cur_col);
    if (end_col == width) { // a full last row: the terminal waits at its end, so step to the next
        out += "\r\n";
        end_row++;
    }
    if (cur_col == width) cur_row++, cur_col = 0;
    if (end_row > cur_row) out += "\x1b[" + std::to_string(end_row - cur_row) + "A";
    out += "\r";
    if (cur_col) out += "\x1b[" + std::to_string(cur_col) + "C";
    *row = cur_row;
    return out;
}

inline void LineEditor::refresh() {
    winsize ws;
    const size_t width = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 ? ws.ws_col : 0;
    const std::string out = le_redraw(prompt_, buf_, pos_, width, &row_);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
}

enum { LE_HOME = 0x100, LE_END, LE_LEFT, LE_RIGHT, LE_UP, LE_DOWN, LE_DELETE, LE_BACKSPACE, LE_IGNORE };

// The next key: a byte of text (< 0x100), one of the LE_ keys, or -1 at the end of input.
inline int LineEditor::read_key() {
    int c = read_byte();
    switch (c) {
    case 1: return LE_HOME;   // Ctrl-A
    case 5: return LE_END;    // Ctrl-E
    case 2: return LE_LEFT;   // Ctrl-B
    case 6: return LE_RIGHT;  // Ctrl-F
    case 16: return LE_UP;    // Ctrl-P
    case 14: return LE_DOWN;  // Ctrl-N
    case 8: case 0x7f: return LE_BACKSPACE;
    case 0x1b: break;
    default: return c;
    }
    // ESC [ params final  or  ESC O final
    int a = read_byte(), final = read_byte();
    std::string params;
    while (a == '[' && final >= 0x20 && final < 0x40) {
        params += (char)final;
        final = read_byte();
    }
    if (a != '[' && a != 'O') return LE_IGNORE;
    switch (final) {
    case 'A': return LE_UP;
    case 'B': return LE_DOWN;
    case 'C': return LE_RIGHT;
    case 'D': return LE_LEFT;
    case 'H': return LE_HOME;
    case 'F': return LE_END;
    case '~': return params == "1" || params == "7" ? LE_HOME : params == "4" || params == "8" ? LE_END : params == "3" ? LE_DELETE : LE_IGNORE;
    default: return LE_IGNORE;
    }
}

inline LineResult LineEditor::read_raw(std::string* line) {
    buf_.clear();
    pos_ = row_ = 0;
    size_t hist = history_.size(); // == size(): the line being typed
    std::string typed;             // that line, kept while browsing the history
    refresh();
    for (;;) {
        int key = read_key();
        if (key < 0 || (key == 4 && buf_.empty())) return LineResult::EndOfInput; // Ctrl-D on an empty line
        if (key == 3) { // Ctrl-C: "^C" goes after the whole line
            pos_ = buf_.size();
            refresh();
            return LineResult::Interrupted;
        }
        if (key == '\r' || key == '\n') {
            pos_ = buf_.size(); // the cursor to the end, so what follows goes below the whole line
            refresh();
            *line = buf_;
            return LineResult::Line;
        }
        switch (key) {
        case LE_HOME: pos_ = 0; break;
        case LE_END: pos_ = buf_.size(); break;
        case LE_LEFT:
            while (pos_ > 0 && le_continuation((unsigned char)buf_[--pos_])) {}
            break;
        case LE_RIGHT:
            if (pos_ < buf_.size()) while (++pos_ < buf_.size() && le_continuation((unsigned char)buf_[pos_])) {}
            break;
        case LE_BACKSPACE: {
            size_t end = pos_;
            while (pos_ > 0 && le_continuation((unsigned char)buf_[--pos_])) {}
            buf_.erase(pos_, end - pos_);
            break;
        }
        case LE_DELETE: case 4: { // Ctrl-D within a line deletes, like Delete
            size_t end = pos_;
            if (end < buf_.size()) while (++end < buf_.size() && le_continuation((unsigned char)buf_[end])) {}
            buf_.erase(pos_, end - pos_);
            break;
        }
        case 21: buf_.clear(); pos_ = 0; break; // Ctrl-U
        case LE_UP: case LE_DOWN: {
            size_t next = key == LE_UP ? (hist > 0 ? hist - 1 : hist) : (hist < history_.size() ? hist + 1 : hist);
            if (next == hist) break;
            if (hist == history_.size()) typed = buf_;
            hist = next;
            buf_ = hist == history_.size() ? typed : history_[hist];
            pos_ = buf_.size();
            break;
        }
        default:
            if (key < 0x20 || key >= 0x100) continue; // other control keys
            buf_.insert(pos_++, 1, (char)key);          // text, one UTF-8 byte at a time
        }
        refresh();
    }
}

inline LineResult LineEditor::read(const char* prompt, std::string* line) {
    termios saved;
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved) != 0) {
        std::fputs(prompt, stdout);
        std::fflush(stdout);
        return std::getline(std::cin, *line) ? LineResult::Line : LineResult::EndOfInput;
    }
    termios raw = saved;
    raw.c_iflag &= ~(tcflag_t)(ICRNL | IXON | BRKINT | ISTRIP | INPCK);
    raw.c_lflag &= ~(tcflag_t)(ECHO | ICANON | ISIG | IEXTEN); // ISIG off: Ctrl-C arrives as a byte
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    tcsetattr(STDIN_FILENO, TCSANOW, &raw); // TCSANOW keeps what was typed ahead
    prompt_ = prompt;
    LineResult r = read_raw(line);
    tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    std::fputs(r == LineResult::Interrupted ? "^C\n" : "\n", stdout);
    std::fflush(stdout);
    return r;
}
#else
inline LineResult LineEditor::read(const char* prompt, std::string* line) {
    std::fputs(prompt, stdout);
    std::fflush(stdout);
    if (std::getline(std::cin, *line)) return LineResult::Line;
    if (std::cin.eof()) return LineResult::EndOfInput;
    std::cin.clear(); // Ctrl-C at the console's prompt
    return LineResult::Interrupted;
}
#endif
