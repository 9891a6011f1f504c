package plugin

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sandstep/sandstep/providers"
)

// The host speaks go-plugin's client protocol itself instead of linking
// go-plugin's client, which brings net/rpc, gob, html/template, yamux, the
// gRPC reflection service and debug/elf, macho and pe into every binary
// that imports it (about 0.8 MB of each Lambda; BENCHMARKS.md). The plugin
// side is go-plugin's own Serve, unchanged: what follows is the part of its
// protocol a gRPC host uses (go-plugin v1.7.0, docs/internals.md there):
//
//   - the host starts the plugin with the magic cookie, the protocol
//     versions it accepts and the port range in its environment (and its
//     certificate with Options.MTLS);
//   - the plugin answers with one line on stdout,
//     CORE-VERSION|APP-VERSION|NETWORK|ADDRESS|PROTOCOL|SERVER-CERT, and serves
//     gRPC there: our provider service, grpc.health.v1 for "plugin",
//     plugin.GRPCStdio (what the plugin writes to os.Stdout and os.Stderr
//     after the handshake) and plugin.GRPCController (Shutdown);
//   - the plugin's real stderr carries its log lines, hclog JSON.

// coreProtocolVersion is go-plugin's CoreProtocolVersion: the version of
// the handshake itself.
const coreProtocolVersion = 1

// go-plugin's defaults for the TCP port range, which a plugin uses only
// where it cannot listen on a Unix socket.
const (
	pluginMinPort = 10000
	pluginMaxPort = 25000
)

// The services go-plugin's server registers beside the plugin's own.
const (
	healthService     = "plugin" // go-plugin's GRPCServiceName
	methodStreamStdio = "/plugin.GRPCStdio/StreamStdio"
	methodShutdown    = "/plugin.GRPCController/Shutdown"
)

// exitMessage is logged when the plugin process ends, at error level when
// its exit status is not zero and the host did not end it on purpose.
const exitMessage = "plugin process exited"

// process is one started plugin process: its pipes, its exit and its gRPC
// connection once the handshake is done.
type process struct {
	cmd    *exec.Cmd
	logger *slog.Logger
	// ending is set before the host ends the process itself, so that its
	// exit is not logged as an error.
	ending atomic.Bool
	// done is closed once the process has exited and its pipes are drained.
	done chan struct{}
	conn *grpc.ClientConn
	// stdio ends the stream relaying the plugin's os.Stdout and os.Stderr.
	stdio context.CancelFunc
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// startProcess runs the plugin at path and completes go-plugin's handshake
// within timeout. env is the plugin's whole environment but for what the
// handshake adds.
func startProcess(path string, env []string, logger *slog.Logger, mtls func() (ClientCert, error), timeout time.Duration) (*process, error) {
	cmd := exec.Command(path)
	cmd.Env = append(env,
		magicCookieKey+"="+magicCookieValue,
		"PLUGIN_MIN_PORT="+strconv.Itoa(pluginMinPort),
		"PLUGIN_MAX_PORT="+strconv.Itoa(pluginMaxPort),
		"PLUGIN_PROTOCOL_VERSIONS="+strconv.Itoa(providers.APIVersion),
	)
	cmd.SysProcAttr = pluginSysProcAttr()
	var tlsConfig *tls.Config
	if mtls != nil {
		cc, err := mtls()
		if err != nil {
			return nil, fmt.Errorf("mTLS: %w", err)
		}
		cmd.Env = append(cmd.Env, "PLUGIN_CLIENT_CERT="+string(cc.PEM))
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cc.Cert}, MinVersion: tls.VersionTLS12}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	// Started on the fork thread, so that the plugin's parent-death signal
	// stays armed (see orphans.go).
	onForkThread(func() { err = cmd.Start() })
	if err != nil {
		if note := archNote(path); errors.Is(err, syscall.ENOEXEC) && note != "" {
			return nil, fmt.Errorf("%w; %s", err, note)
		}
		return nil, err
	}
	logger.Debug("plugin started", "path", path, "pid", cmd.Process.Pid)
	p := &process{cmd: cmd, logger: logger, done: make(chan struct{})}
	var pipes sync.WaitGroup
	pipes.Go(func() { relayLogs(logger, stderr) })
	lines := make(chan string, 1)
	pipes.Go(func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, maxLogLine)
		if sc.Scan() {
			lines <- sc.Text()
		}
		// Whatever else reaches the real stdout (go-plugin moves os.Stdout
		// to the stdio stream after the handshake) is relayed, so that the
		// pipe never fills.
		w := &lineLogger{l: logger, stream: "stdout"}
		_, _ = io.Copy(w, stdout)
	})
	go func() {
		// cmd.Wait closes the pipes: it must wait for them to be drained.
		pipes.Wait()
		err := cmd.Wait()
		switch {
		case err != nil && !p.ending.Load():
			logger.Error(exitMessage, "pid", cmd.Process.Pid, "error", err.Error())
		case err != nil:
			logger.Info(exitMessage, "pid", cmd.Process.Pid, "exit", err.Error())
		default:
			logger.Info(exitMessage, "pid", cmd.Process.Pid)
		}
		close(p.done)
	}()

	t := time.NewTimer(timeout)
	defer t.Stop()
	var line string
	select {
	case l, ok := <-lines:
		if !ok {
			p.kill()
			return nil, errors.New("plugin exited before we could connect")
		}
		line = l
	case <-t.C:
		p.kill()
		return nil, errors.New("timeout while waiting for plugin to start")
	}
	if err := p.connect(line, tlsConfig); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// connect reads the handshake line and dials the address it names.
func (p *process) connect(line string, tlsConfig *tls.Config) error {
	parts := strings.Split(strings.TrimSpace(line), "|")
	if len(parts) < 4 {
		msg := fmt.Sprintf("unrecognized remote plugin message: %q", line)
		if note := archNote(p.cmd.Path); note != "" {
			msg += "; " + note
		}
		return errors.New(msg)
	}
	if core, err := strconv.Atoi(parts[0]); err != nil || core != coreProtocolVersion {
		return fmt.Errorf("incompatible core plugin protocol: the plugin speaks %q, this host speaks %d; rebuild the plugin", parts[0], coreProtocolVersion)
	}
	version, err := strconv.Atoi(parts[1])
	if err != nil {
		return fmt.Errorf("plugin protocol version %q: %w", parts[1], err)
	}
	if version != providers.APIVersion {
		return &versionError{plugin: version}
	}
	network, address := parts[2], parts[3]
	if network != "unix" && network != "tcp" {
		return fmt.Errorf("plugin listens on an unknown network %q", network)
	}
	if len(parts) < 5 || parts[4] != "grpc" {
		proto := "netrpc"
		if len(parts) >= 5 {
			proto = parts[4]
		}
		return fmt.Errorf("the plugin speaks %q; this host speaks only grpc", proto)
	}
	creds := insecure.NewCredentials()
	if tlsConfig != nil {
		// go-plugin sends its one-time certificate only when the host sent
		// one; shorter text in that place is padding from old servers.
		if len(parts) < 6 || len(parts[5]) <= 50 {
			return errors.New("mTLS: the plugin sent no certificate")
		}
		der, err := base64.RawStdEncoding.DecodeString(parts[5])
		if err != nil {
			return fmt.Errorf("mTLS: the plugin's certificate: %w", err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("mTLS: the plugin's certificate: %w", err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(cert)
		tlsConfig.RootCAs = pool
		tlsConfig.ServerName = "localhost"
		creds = credentials.NewTLS(tlsConfig)
	}
	conn, err := grpc.NewClient("passthrough:///plugin",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, address)
		}),
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize), grpc.MaxCallSendMsgSize(maxMessageSize)),
	)
	if err != nil {
		return fmt.Errorf("connecting to the plugin at %s: %w", address, err)
	}
	p.conn = conn
	ctx, cancel := context.WithCancel(context.Background())
	p.stdio = cancel
	go p.relayStdio(ctx)
	return nil
}

// ClientCert is the host's certificate for mTLS with the plugin: PEM is
// handed to the plugin, which accepts only it; Cert is what the host
// presents.
type ClientCert struct {
	PEM  []byte
	Cert tls.Certificate
}

// versionError is a plugin that speaks another provider protocol version.
type versionError struct{ plugin int }

func (e *versionError) Error() string {
	return fmt.Sprintf("the plugin speaks provider protocol version %d, this host speaks version %d", e.plugin, providers.APIVersion)
}

// relayStdio logs what the plugin writes to its os.Stdout and os.Stderr
// after the handshake, which go-plugin's server streams over gRPC and
// holds back (blocking the plugin's writes) until a host reads it.
func (p *process) relayStdio(ctx context.Context) {
	stream, err := p.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, methodStreamStdio, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return
	}
	if err := stream.SendMsg(&rawMessage{}); err != nil {
		return
	}
	if err := stream.CloseSend(); err != nil {
		return
	}
	out := &lineLogger{l: p.logger, stream: "stdout"}
	errw := &lineLogger{l: p.logger, stream: "stderr"}
	for {
		var m rawMessage
		if err := stream.RecvMsg(&m); err != nil {
			return
		}
		channel, data := parseStdioData(m)
		switch channel {
		case 1:
			_, _ = out.Write(data)
		case 2:
			_, _ = errw.Write(data)
		}
	}
}

// parseStdioData decodes go-plugin's StdioData{channel = 1; data = 2}.
func parseStdioData(b []byte) (channel int, data []byte) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, nil
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, nil
			}
			channel, b = int(v), b[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, nil
			}
			data, b = v, b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return 0, nil
			}
			b = b[n:]
		}
	}
	return channel, data
}

// rawMessage is a message already in its wire form; go-plugin's stdio and
// controller services take google.protobuf.Empty, which is no bytes.
type rawMessage []byte

// rawCodec passes rawMessage through as it is. Named "proto", so that the
// plugin decodes what it receives as protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*rawMessage)), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*rawMessage)) = append(rawMessage(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// shutdown asks the plugin to stop, as go-plugin's Kill does: the
// plugin's controller stops its server and the process exits.
func (p *process) shutdown(ctx context.Context) error {
	var out rawMessage
	return p.conn.Invoke(ctx, methodShutdown, &rawMessage{}, &out, grpc.ForceCodec(rawCodec{}))
}

// kill ends the process at once and waits for it and its pipes.
// os.Process.Kill cannot hit another process that reused the pid: the
// process is not waited for until it has exited.
func (p *process) kill() {
	p.ending.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.done
	p.close()
}

// close releases the connection; the process must have exited.
func (p *process) close() {
	if p.stdio != nil {
		p.stdio()
	}
	if p.conn != nil {
		_ = p.conn.Close()
	}
}

// elfMachines names the ELF machine codes of the architectures Go builds
// for that a plugin is likely to be built for by mistake.
var elfMachines = map[uint16]string{3: "386", 40: "arm", 62: "amd64", 183: "arm64", 243: "riscv64", 21: "ppc64le", 22: "s390x"}

// archNote explains a plugin that printed no handshake because it is not
// a program for this machine, which go-plugin's client diagnoses with
// debug/elf, macho and pe; reading the ELF header is enough on Linux.
func archNote(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var hdr [20]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil || string(hdr[:4]) != "\x7fELF" {
		return "the plugin binary is not an ELF executable"
	}
	order := binary.ByteOrder(binary.LittleEndian)
	if hdr[5] == 2 {
		order = binary.BigEndian
	}
	machine := order.Uint16(hdr[18:])
	arch, ok := elfMachines[machine]
	if !ok {
		arch = fmt.Sprintf("ELF machine %d", machine)
	}
	if arch == runtime.GOARCH {
		return ""
	}
	return fmt.Sprintf("the plugin binary is built for %s, this host is %s/%s", arch, runtime.GOOS, runtime.GOARCH)
}
