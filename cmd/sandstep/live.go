package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/mattn/go-isatty"
	"golang.org/x/sys/unix"
)

// liveView shows a view that changes (a job's steps). On a terminal each
// new view replaces the last one in place; anywhere else (a file, a pipe, a
// CI log) views are appended, so that the record reads top to bottom.
type liveView struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	width int    // the terminal's columns; 0 when unknown
	last  string // the view on screen
	lines int    // how many lines it takes on screen
}

func newLiveView(w io.Writer) *liveView {
	v := &liveView{w: w, tty: isTerminal(w)}
	if v.tty {
		if ws, err := unix.IoctlGetWinsize(int(w.(*os.File).Fd()), unix.TIOCGWINSZ); err == nil {
			v.width = int(ws.Col)
		}
	}
	return v
}

// isTerminal reports whether f (a reader or writer) is a terminal.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && isatty.IsTerminal(file.Fd())
}

// show replaces the view on a terminal, else appends it.
func (v *liveView) show(view string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.erase()
	v.draw(view)
}

// note prints a line that stays (a warning) above the view.
func (v *liveView) note(line string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !strings.HasSuffix(line, "\n") {
		line += "\n"
	}
	if !v.tty {
		io.WriteString(v.w, line)
		return
	}
	v.erase()
	io.WriteString(v.w, line)
	v.draw(v.last)
}

// erase moves the cursor to the start of the view on screen and clears from
// there down.
func (v *liveView) erase() {
	if v.tty && v.lines > 0 {
		fmt.Fprintf(v.w, "\x1b[%dF\x1b[J", v.lines)
	}
	v.lines = 0
}

func (v *liveView) draw(view string) {
	v.last = view
	if !v.tty {
		io.WriteString(v.w, view)
		return
	}
	// A line wider than the terminal would wrap and take two rows, which
	// the next erase would not count: cut it instead.
	var b strings.Builder
	for _, line := range strings.SplitAfter(view, "\n") {
		if line == "" {
			continue
		}
		text := strings.TrimSuffix(line, "\n")
		if r := []rune(text); v.width > 1 && len(r) >= v.width {
			text = string(r[:v.width-1])
		}
		b.WriteString(text)
		if strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
			v.lines++
		}
	}
	io.WriteString(v.w, b.String())
}
