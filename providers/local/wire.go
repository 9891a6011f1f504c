package local

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"reflect"
	"sync"
	"time"

	"github.com/sandstep/sandstep/internal/service/version"
	"github.com/sandstep/sandstep/providers"
)

// The plugin talks to the agent inside a sandbox over a unix socket, one
// connection per request. A frame is a type byte, a big-endian uint32 length
// and the payload. The plugin opens with a header frame (a JSON request);
// then both sides send the frames the operation needs; the agent ends with a
// result frame (JSON) and closes. Binary data travels raw, never in JSON.
const (
	frameHeader byte = 'H' // JSON: request (plugin) or open reply of a read (agent)
	frameStdin  byte = 'i' // stdin bytes; empty = end of stdin
	frameStdout byte = 'o'
	frameStderr byte = 'e'
	frameData   byte = 'd' // file bytes; empty = end of file
	frameResult byte = 'R' // JSON result; the agent's last frame
)

// maxFrame bounds a frame so that a confused peer cannot make the other side
// allocate without limit; chunks are far smaller.
const (
	maxFrame  = 1 << 20
	chunkSize = 256 << 10
)

const (
	opExec  = "exec"
	opWrite = "write"
	opRead  = "read"
	opList  = "list"
	opPing  = "ping"
	// opDial connects to a port on the sandbox's loopback and answers
	// with the connected socket (an exposed port; ports.go).
	opDial = "dial"
)

type request struct {
	Op string `json:"op"`

	// exec
	Argv      []string          `json:"argv,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Stdin     bool              `json:"stdin,omitempty"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"`

	// files
	Path   string `json:"path,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
	Offset int64  `json:"offset,omitempty"`
	Limit  int64  `json:"limit,omitempty"`

	// dial
	Port int `json:"port,omitempty"`
}

// wireError carries a coded error across the socket; both ends are the same
// binary, so the code travels as its number.
type wireError struct {
	Code    providers.Code `json:"code"`
	Message string         `json:"message"`
}

type result struct {
	Error *wireError `json:"error,omitempty"`

	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	DurationNS int64  `json:"duration_ns,omitempty"`

	Bytes   int64      `json:"bytes,omitempty"`
	Entries []wireFile `json:"entries,omitempty"`
}

type wireFile struct {
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"`
	IsDir   bool      `json:"is_dir"`
	ModTime time.Time `json:"mod_time"`
}

// agentProtocol names what the plugin and the agent must agree on: the
// build's version and the shape of everything that travels between them.
// The agent is usually a binary of its own (cmd/sandstep-local-agent),
// built apart from the plugin; the probe at Configure compares the two.
func agentProtocol() string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %d %d %d %d %d %d\n", []byte{frameHeader, frameStdin, frameStdout, frameStderr, frameData, frameResult},
		maxFrame, chunkSize, fdReady, fdListener, fdConfig, fdExecGroups)
	fmt.Fprintln(h, opExec, opWrite, opRead, opList, opPing, opDial, opEgress)
	for _, v := range []any{request{}, result{}, wireError{}, wireFile{}, agentConfig{}, rlimits{}, execStatus{}} {
		t := reflect.TypeOf(v)
		fmt.Fprintf(h, "%s{", t.Name())
		for i := range t.NumField() {
			f := t.Field(i)
			fmt.Fprintf(h, "%s %s %q;", f.Name, f.Type, f.Tag)
		}
		fmt.Fprintln(h, "}")
	}
	return version.Version + "-" + hex.EncodeToString(h.Sum(nil)[:6])
}

func errResult(code providers.Code, format string, args ...any) result {
	return result{Error: &wireError{Code: code, Message: fmt.Sprintf(format, args...)}}
}

// err turns a wire error back into a coded provider error.
func (e *wireError) err(op string) error {
	if e == nil {
		return nil
	}
	return providers.Errorf(e.Code, op, "%s", e.Message)
}

// frameWriter serialises frames from several goroutines (stdout and stderr
// pumps share one connection).
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (fw *frameWriter) write(typ byte, payload []byte) error {
	var hdr [5]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if c, ok := fw.w.(net.Conn); ok {
		bufs := net.Buffers{hdr[:], payload}
		_, err := bufs.WriteTo(c)
		return err
	}
	if _, err := fw.w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := fw.w.Write(payload)
	return err
}

func (fw *frameWriter) writeJSON(typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return fw.write(typ, b)
}

type frameReader struct {
	r   *bufio.Reader
	buf []byte
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next frame. The payload is only valid until the next call.
func (fr *frameReader) next() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes exceeds the %d byte limit", n, maxFrame)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	b := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[0], b, nil
}
