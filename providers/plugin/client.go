package plugin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sandstep/sandstep/providers"
	pb "github.com/sandstep/sandstep/providers/proto"
)

// grpcClient is providers.Provider over one plugin connection. It knows
// nothing of processes: restarting is Client's job.
type grpcClient struct {
	conn *grpc.ClientConn
	rpc  pb.ProviderClient
}

var _ providers.Provider = (*grpcClient)(nil)

func newGRPCClient(conn *grpc.ClientConn) *grpcClient {
	return &grpcClient{conn: conn, rpc: pb.NewProviderClient(conn)}
}

// ping asks go-plugin's health service whether the plugin still answers.
func (c *grpcClient) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := grpc_health_v1.NewHealthClient(c.conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: healthService})
	return err
}

func (c *grpcClient) Configure(ctx context.Context, cfg providers.Config) error {
	_, err := c.rpc.Configure(ctx, configToProto(cfg))
	return fromStatus(ctx, "configure", err)
}

func (c *grpcClient) Info(ctx context.Context) (providers.Info, error) {
	r, err := c.rpc.Info(ctx, &pb.InfoRequest{})
	if err != nil {
		return providers.Info{}, fromStatus(ctx, "info", err)
	}
	return infoFromProto(r), nil
}

func (c *grpcClient) Create(ctx context.Context, spec providers.CreateSpec) (providers.Sandbox, error) {
	r, err := c.rpc.Create(ctx, &pb.CreateRequest{Spec: createSpecToProto(spec)})
	if err != nil {
		return providers.Sandbox{}, fromStatus(ctx, "create", err)
	}
	return sandboxFromProto(r.GetSandbox()), nil
}

func (c *grpcClient) Get(ctx context.Context, id string) (providers.Sandbox, error) {
	r, err := c.rpc.Get(ctx, &pb.GetRequest{Id: id})
	if err != nil {
		return providers.Sandbox{}, fromStatus(ctx, "get", err)
	}
	return sandboxFromProto(r.GetSandbox()), nil
}

func (c *grpcClient) List(ctx context.Context, f providers.ListFilter) ([]providers.Sandbox, error) {
	r, err := c.rpc.List(ctx, &pb.ListRequest{Labels: f.Labels, Name: f.Name})
	if err != nil {
		return nil, fromStatus(ctx, "list", err)
	}
	var out []providers.Sandbox
	for _, sb := range r.GetSandboxes() {
		out = append(out, sandboxFromProto(sb))
	}
	return out, nil
}

func (c *grpcClient) Terminate(ctx context.Context, id string) error {
	_, err := c.rpc.Terminate(ctx, &pb.TerminateRequest{Id: id})
	return fromStatus(ctx, "terminate", err)
}

// Exec runs the stream protocol: start, stdin chunks from a goroutine,
// output written to the caller's writers as it arrives, then the exit.
// Returning cancels the stream, which ends the command on the plugin side
// if it still runs and unblocks the stdin goroutine if it waits on gRPC; a
// goroutine blocked in req.Stdin's Read ends when that Read returns.
func (c *grpcClient) Exec(ctx context.Context, id string, req providers.ExecRequest) (providers.ExecResult, error) {
	callCtx := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Exec(ctx)
	if err != nil {
		return providers.ExecResult{}, fromStatus(callCtx, "exec", err)
	}
	// An io.EOF from Send means the server already ended the stream; Recv
	// below reports why.
	if err := stream.Send(&pb.ExecRequest{Msg: &pb.ExecRequest_Start{Start: execStartToProto(id, req)}}); err != nil && err != io.EOF {
		return providers.ExecResult{}, fromStatus(callCtx, "exec", err)
	}
	stdinErr := make(chan error, 1)
	if req.Stdin != nil {
		go func() {
			if err := sendStdin(stream, req.Stdin); err != nil {
				// Recorded before cancelling, so the Recv that fails because
				// of the cancel finds it.
				stdinErr <- err
				cancel()
			}
		}()
	} else if err := stream.CloseSend(); err != nil {
		return providers.ExecResult{}, fromStatus(callCtx, "exec", err)
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			select {
			case serr := <-stdinErr:
				return providers.ExecResult{}, fmt.Errorf("exec: reading stdin: %w", serr)
			default:
			}
			if err == io.EOF {
				return providers.ExecResult{}, providers.Errorf(providers.Internal, "exec", "the plugin ended the exec stream without an exit status")
			}
			return providers.ExecResult{}, fromStatus(callCtx, "exec", err)
		}
		switch m := m.GetMsg().(type) {
		case *pb.ExecResponse_Stdout:
			if err := writeOutput(req.Stdout, m.Stdout); err != nil {
				return providers.ExecResult{}, fmt.Errorf("exec: writing stdout: %w", err)
			}
		case *pb.ExecResponse_Stderr:
			if err := writeOutput(req.Stderr, m.Stderr); err != nil {
				return providers.ExecResult{}, fmt.Errorf("exec: writing stderr: %w", err)
			}
		case *pb.ExecResponse_Exit:
			return execExitFromProto(m.Exit), nil
		}
	}
}

func writeOutput(w io.Writer, p []byte) error {
	if w == nil {
		return nil
	}
	_, err := w.Write(p)
	return err
}

var execBufs = sync.Pool{New: func() any { return new([execChunkSize]byte) }}

// sendStdin copies r into the stream in chunks, then marks the end of input.
// It returns only r's errors: a failed Send means the stream is over, and
// the receiving side reports why.
func sendStdin(stream pb.Provider_ExecClient, r io.Reader) error {
	buf := execBufs.Get().(*[execChunkSize]byte)
	defer execBufs.Put(buf)
	for {
		n, err := r.Read(buf[:])
		if n > 0 {
			// A copy per chunk: gRPC may look at a sent message after Send
			// returns, and buf is reused.
			if stream.Send(&pb.ExecRequest{Msg: &pb.ExecRequest_Stdin{Stdin: bytes.Clone(buf[:n])}}) != nil {
				return nil
			}
		}
		if err == io.EOF {
			if stream.Send(&pb.ExecRequest{Msg: &pb.ExecRequest_CloseStdin{CloseStdin: &pb.CloseStdin{}}}) == nil {
				_ = stream.CloseSend()
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

var fileBufs = sync.Pool{New: func() any { return new([fileChunkSize]byte) }}

func (c *grpcClient) WriteFile(ctx context.Context, id string, f providers.WriteFileRequest) error {
	callCtx := ctx
	// Cancelling on every early return is what keeps a failed upload from
	// reaching the plugin as a complete, shorter file.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.WriteFile(ctx)
	if err != nil {
		return fromStatus(callCtx, "write file", err)
	}
	header := &pb.WriteFileRequest{Msg: &pb.WriteFileRequest_Header{Header: &pb.WriteFileHeader{
		SandboxId: id, Path: f.Path, Mode: f.Mode,
	}}}
	if err := stream.Send(header); err != nil {
		return c.closeWrite(callCtx, stream, err)
	}
	if f.Content != nil {
		buf := fileBufs.Get().(*[fileChunkSize]byte)
		defer fileBufs.Put(buf)
		for {
			n, rerr := io.ReadFull(f.Content, buf[:])
			if n > 0 {
				if err := stream.Send(&pb.WriteFileRequest{Msg: &pb.WriteFileRequest_Data{Data: bytes.Clone(buf[:n])}}); err != nil {
					return c.closeWrite(callCtx, stream, err)
				}
			}
			if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
				break
			}
			if rerr != nil {
				return fmt.Errorf("write file: reading content: %w", rerr)
			}
		}
	}
	_, err = stream.CloseAndRecv()
	return fromStatus(callCtx, "write file", err)
}

// closeWrite reports a failed Send: io.EOF means the plugin ended the
// stream early, and its status says why.
func (c *grpcClient) closeWrite(ctx context.Context, stream pb.Provider_WriteFileClient, err error) error {
	if err == io.EOF {
		_, err = stream.CloseAndRecv()
		if err == nil {
			return providers.Errorf(providers.Internal, "write file", "the plugin accepted the file before receiving all of it")
		}
	}
	return fromStatus(ctx, "write file", err)
}

func (c *grpcClient) ReadFile(ctx context.Context, id string, f providers.ReadFileRequest, w io.Writer) (int64, error) {
	callCtx := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.ReadFile(ctx, &pb.ReadFileRequest{SandboxId: id, Path: f.Path, Offset: f.Offset, Limit: f.Limit})
	if err != nil {
		return 0, fromStatus(callCtx, "read file", err)
	}
	var n int64
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fromStatus(callCtx, "read file", err)
		}
		k, err := w.Write(m.GetData())
		n += int64(k)
		if err != nil {
			return n, fmt.Errorf("read file: writing output: %w", err)
		}
	}
}

func (c *grpcClient) ListFiles(ctx context.Context, id, path string) ([]providers.FileInfo, error) {
	r, err := c.rpc.ListFiles(ctx, &pb.ListFilesRequest{SandboxId: id, Path: path})
	if err != nil {
		return nil, fromStatus(ctx, "list files", err)
	}
	var out []providers.FileInfo
	for _, f := range r.GetFiles() {
		out = append(out, fileInfoFromProto(f))
	}
	return out, nil
}

func (c *grpcClient) EnsureSnapshot(ctx context.Context, spec providers.SnapshotSpec) (providers.Snapshot, error) {
	r, err := c.rpc.EnsureSnapshot(ctx, &pb.EnsureSnapshotRequest{Spec: snapshotSpecToProto(spec)})
	if err != nil {
		return providers.Snapshot{}, fromStatus(ctx, "ensure snapshot", err)
	}
	return snapshotFromProto(r.GetSnapshot()), nil
}

func (c *grpcClient) GetSnapshot(ctx context.Context, slug string) (providers.Snapshot, error) {
	r, err := c.rpc.GetSnapshot(ctx, &pb.GetSnapshotRequest{Slug: slug})
	if err != nil {
		return providers.Snapshot{}, fromStatus(ctx, "get snapshot", err)
	}
	return snapshotFromProto(r.GetSnapshot()), nil
}

func (c *grpcClient) DeleteSnapshot(ctx context.Context, slug string) error {
	_, err := c.rpc.DeleteSnapshot(ctx, &pb.DeleteSnapshotRequest{Slug: slug})
	return fromStatus(ctx, "delete snapshot", err)
}

func (c *grpcClient) ListSnapshots(ctx context.Context, labels map[string]string) ([]providers.Snapshot, error) {
	r, err := c.rpc.ListSnapshots(ctx, &pb.ListSnapshotsRequest{Labels: labels})
	if err != nil {
		return nil, fromStatus(ctx, "list snapshots", err)
	}
	var out []providers.Snapshot
	for _, s := range r.GetSnapshots() {
		out = append(out, snapshotFromProto(s))
	}
	return out, nil
}

func (c *grpcClient) CreateVolume(ctx context.Context, spec providers.VolumeSpec) (providers.Volume, error) {
	r, err := c.rpc.CreateVolume(ctx, &pb.CreateVolumeRequest{Spec: volumeSpecToProto(spec)})
	if err != nil {
		return providers.Volume{}, fromStatus(ctx, "create volume", err)
	}
	return volumeFromProto(r.GetVolume()), nil
}

func (c *grpcClient) GetVolume(ctx context.Context, slug string) (providers.Volume, error) {
	r, err := c.rpc.GetVolume(ctx, &pb.GetVolumeRequest{Slug: slug})
	if err != nil {
		return providers.Volume{}, fromStatus(ctx, "get volume", err)
	}
	return volumeFromProto(r.GetVolume()), nil
}

func (c *grpcClient) DeleteVolume(ctx context.Context, slug string) error {
	_, err := c.rpc.DeleteVolume(ctx, &pb.DeleteVolumeRequest{Slug: slug})
	return fromStatus(ctx, "delete volume", err)
}

func (c *grpcClient) ListVolumes(ctx context.Context, labels map[string]string) ([]providers.Volume, error) {
	r, err := c.rpc.ListVolumes(ctx, &pb.ListVolumesRequest{Labels: labels})
	if err != nil {
		return nil, fromStatus(ctx, "list volumes", err)
	}
	var out []providers.Volume
	for _, v := range r.GetVolumes() {
		out = append(out, volumeFromProto(v))
	}
	return out, nil
}
