package modal_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sandstep/sandstep/internal/testkit/fakemodal"
	"github.com/sandstep/sandstep/providers"
	"github.com/sandstep/sandstep/providers/plugin"
)

func benchSandbox(b *testing.B) (*fakemodal.Running, *plugin.Client, string) {
	b.Helper()
	f := startFake(b, fakemodal.Options{})
	p := startPlugin(b, settingsFor(f.URL, nil), testSecrets(), nil)
	sb, err := p.Create(context.Background(), providers.CreateSpec{Lifetime: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Terminate(context.Background(), sb.ID) })
	return f, p, sb.ID
}

// BenchmarkCreateToFirstExec is create, the first exec (`true`) and
// terminate through the plugin: what a job waits before its first command.
func BenchmarkCreateToFirstExec(b *testing.B) {
	f := startFake(b, fakemodal.Options{})
	p := startPlugin(b, settingsFor(f.URL, nil), testSecrets(), nil)
	ctx := context.Background()
	for b.Loop() {
		sb, err := p.Create(ctx, providers.CreateSpec{Lifetime: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		if r, err := p.Exec(ctx, sb.ID, providers.ExecRequest{Argv: []string{"true"}, Timeout: time.Minute}); err != nil || r.ExitCode != 0 {
			b.Fatalf("exec: %+v, %v", r, err)
		}
		if err := p.Terminate(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExec is one short command through the plugin and the router
// (start, both streams, wait).
func BenchmarkExec(b *testing.B) {
	_, p, id := benchSandbox(b)
	var out bytes.Buffer
	for b.Loop() {
		out.Reset()
		res, err := p.Exec(context.Background(), id, providers.ExecRequest{Argv: []string{"echo", "hi"}, Stdout: &out, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 || out.String() != "hi\n" {
			b.Fatalf("exec: %v, %+v, %q", err, res, out.String())
		}
	}
}

// BenchmarkRawRouterExec is the same command as bare router calls (start,
// read stdout, wait) on the generated client: the baseline of
// BenchmarkExec, whose difference is the provider and the plugin.
func BenchmarkRawRouterExec(b *testing.B) {
	f, _, id := benchSandbox(b)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-modal-token-id", testTokenID, "x-modal-token-secret", testTokenSecret)
	conn, err := grpc.NewClient(f.URL[len("http://"):], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	cp := pb.NewModalClientClient(conn)
	tok, err := cp.AuthTokenGet(ctx, &pb.AuthTokenGetRequest{})
	if err != nil {
		b.Fatal(err)
	}
	actx := metadata.AppendToOutgoingContext(ctx, "x-modal-auth-token", tok.GetToken())
	task, err := cp.SandboxGetTaskIdV2(actx, pb.SandboxGetTaskIdRequest_builder{SandboxId: id}.Build())
	if err != nil {
		b.Fatal(err)
	}
	access, err := cp.SandboxGetCommandRouterAccess(actx, pb.SandboxGetCommandRouterAccessRequest_builder{SandboxId: &id}.Build())
	if err != nil {
		b.Fatal(err)
	}
	rc := pb.NewTaskCommandRouterClient(conn)
	rctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+access.GetJwt())
	n := 0
	for b.Loop() {
		n++
		execID := "bench-" + string(rune('a'+n%26)) + time.Now().Format("150405.000000000")
		if _, err := rc.TaskExecStart(rctx, pb.TaskExecStartRequest_builder{TaskId: task.GetTaskId(), ExecId: execID, CommandArgs: []string{"echo", "hi"},
			StdoutConfig: pb.TaskExecStdoutConfig_TASK_EXEC_STDOUT_CONFIG_PIPE}.Build()); err != nil {
			b.Fatal(err)
		}
		if _, err := rc.TaskExecStdinWrite(rctx, pb.TaskExecStdinWriteRequest_builder{TaskId: task.GetTaskId(), ExecId: execID, Eof: true}.Build()); err != nil {
			b.Fatal(err)
		}
		st, err := rc.TaskExecStdioRead(rctx, pb.TaskExecStdioReadRequest_builder{TaskId: task.GetTaskId(), ExecId: execID}.Build())
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := st.Recv(); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
		if _, err := rc.TaskExecWait(rctx, pb.TaskExecWaitRequest_builder{TaskId: task.GetTaskId(), ExecId: execID}.Build()); err != nil {
			b.Fatal(err)
		}
	}
}

const benchFileSize = 8 << 20

// BenchmarkFiles is the throughput of an 8 MiB binary file each way.
func BenchmarkFiles(b *testing.B) {
	_, p, id := benchSandbox(b)
	data := make([]byte, benchFileSize)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b.Run("write", func(b *testing.B) {
		b.SetBytes(benchFileSize)
		for b.Loop() {
			if err := p.WriteFile(context.Background(), id, providers.WriteFileRequest{Path: "/workspace/bench", Content: bytes.NewReader(data)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		b.SetBytes(benchFileSize)
		for b.Loop() {
			if n, err := p.ReadFile(context.Background(), id, providers.ReadFileRequest{Path: "/workspace/bench"}, io.Discard); err != nil || n != benchFileSize {
				b.Fatalf("read %d: %v", n, err)
			}
		}
	})
}

// BenchmarkGet is Get through the plugin for a sandbox without and with an
// exposed port: the second also asks for its tunnels (one more RPC), which
// the sandbox owner pays on every reuse and cleanup of such a sandbox.
func BenchmarkGet(b *testing.B) {
	f := startFake(b, fakemodal.Options{})
	p := startPlugin(b, settingsFor(f.URL, nil), testSecrets(), nil)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		ports []int
	}{{"no-ports", nil}, {"one-port", []int{8080}}} {
		sb, err := p.Create(ctx, providers.CreateSpec{Lifetime: time.Hour, ExposePorts: c.ports})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				got, err := p.Get(ctx, sb.ID)
				if err != nil || len(got.PortURLs) != len(c.ports) {
					b.Fatalf("get: %+v, %v", got, err)
				}
			}
		})
		_ = p.Terminate(ctx, sb.ID)
	}
}
