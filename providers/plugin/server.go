package plugin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"

	"github.com/sandstep/sandstep/providers"
	pb "github.com/sandstep/sandstep/providers/proto"
)

const (
	// maxMessageSize bounds every gRPC message on both ends. Bulk data moves
	// in chunks far below it; only unary list answers (a directory with
	// tens of thousands of entries) come near the 4 MiB gRPC default, so the
	// limit is raised to 16 MiB and no further.
	maxMessageSize = 16 << 20
	// fileChunkSize is the largest data chunk of WriteFile and ReadFile.
	fileChunkSize = 1 << 20
	// execChunkSize is the largest stdin, stdout or stderr chunk of Exec:
	// small enough that output shows up while a command runs.
	execChunkSize = 64 << 10
)

// newGRPCServer is go-plugin's gRPC server factory with our limits.
func newGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.MaxRecvMsgSize(maxMessageSize), grpc.MaxSendMsgSize(maxMessageSize))
	return grpc.NewServer(opts...)
}

// server serves a providers.Provider as the gRPC Provider service.
type server struct {
	pb.UnimplementedProviderServer
	impl providers.Provider
}

func (s *server) Configure(ctx context.Context, r *pb.ConfigureRequest) (*pb.ConfigureResponse, error) {
	if err := s.impl.Configure(ctx, configFromProto(r)); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ConfigureResponse{}, nil
}

func (s *server) Info(ctx context.Context, _ *pb.InfoRequest) (*pb.InfoResponse, error) {
	info, err := s.impl.Info(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	// What an embedded Unsupported type refuses is not claimed, whatever
	// Info says: the host plans by these.
	info.Capabilities = providers.TruthfulCapabilities(s.impl, info.Capabilities)
	return infoToProto(info), nil
}

func (s *server) Create(ctx context.Context, r *pb.CreateRequest) (*pb.CreateResponse, error) {
	sb, err := s.impl.Create(ctx, createSpecFromProto(r.GetSpec()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.CreateResponse{Sandbox: sandboxToProto(sb)}, nil
}

func (s *server) Get(ctx context.Context, r *pb.GetRequest) (*pb.GetResponse, error) {
	sb, err := s.impl.Get(ctx, r.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.GetResponse{Sandbox: sandboxToProto(sb)}, nil
}

func (s *server) List(ctx context.Context, r *pb.ListRequest) (*pb.ListResponse, error) {
	sbs, err := s.impl.List(ctx, providers.ListFilter{Labels: r.GetLabels(), Name: r.GetName()})
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ListResponse{Sandboxes: make([]*pb.Sandbox, len(sbs))}
	for i, sb := range sbs {
		out.Sandboxes[i] = sandboxToProto(sb)
	}
	return out, nil
}

func (s *server) Terminate(ctx context.Context, r *pb.TerminateRequest) (*pb.TerminateResponse, error) {
	if err := s.impl.Terminate(ctx, r.GetId()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.TerminateResponse{}, nil
}

func (s *server) Exec(stream pb.Provider_ExecServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return toStatus(providers.Errorf(providers.InvalidArgument, "exec", "the first message of an exec stream must be start"))
	}
	req := execRequestFromProto(start)
	out := &execOutput{stream: stream}
	req.Stdout = execWriter{out, false}
	req.Stderr = execWriter{out, true}
	if start.GetHasStdin() {
		pr, pw := io.Pipe()
		req.Stdin = pr
		// A command that ends without reading all of its input must not
		// leave the pump blocked on the pipe.
		defer pr.Close()
		go pumpStdin(stream, pw)
	}
	res, err := s.impl.Exec(ctx, start.GetSandboxId(), req)
	out.finish()
	if err != nil {
		return toStatus(err)
	}
	return out.send(&pb.ExecResponse{Msg: &pb.ExecResponse_Exit{Exit: execExitToProto(res)}})
}

// pumpStdin feeds the stdin chunks of an exec stream into the command's
// standard input. It ends at close_stdin or the client's half-close (end of
// input), or when the stream breaks (the command reads the error).
func pumpStdin(stream pb.Provider_ExecServer, pw *io.PipeWriter) {
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			pw.Close()
			return
		}
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		switch m := m.GetMsg().(type) {
		case *pb.ExecRequest_Stdin:
			if _, err := pw.Write(m.Stdin); err != nil {
				return
			}
		case *pb.ExecRequest_CloseStdin:
			pw.Close()
			return
		default:
			pw.CloseWithError(providers.Errorf(providers.InvalidArgument, "exec", "unexpected %T after start", m))
			return
		}
	}
}

var errExecOver = errors.New("exec output written after the command ended")

// execOutput serialises the stdout and stderr writers of one exec onto the
// stream, whose Send must not be called concurrently.
type execOutput struct {
	mu     sync.Mutex
	stream pb.Provider_ExecServer
	done   bool
	err    error
}

func (o *execOutput) write(stderr bool, p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return 0, errExecOver
	}
	if o.err != nil {
		return 0, o.err
	}
	n := 0
	for len(p) > 0 {
		// A copy, because the writer's caller reuses p once Write returns
		// and gRPC may look at a sent message after Send returns.
		chunk := bytes.Clone(p[:min(len(p), execChunkSize)])
		m := &pb.ExecResponse{Msg: &pb.ExecResponse_Stdout{Stdout: chunk}}
		if stderr {
			m = &pb.ExecResponse{Msg: &pb.ExecResponse_Stderr{Stderr: chunk}}
		}
		if err := o.stream.Send(m); err != nil {
			o.err = err
			return n, err
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// finish refuses further output: a provider goroutine still copying after
// Exec returned must not race the final message.
func (o *execOutput) finish() {
	o.mu.Lock()
	o.done = true
	o.mu.Unlock()
}

func (o *execOutput) send(m *pb.ExecResponse) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stream.Send(m)
}

type execWriter struct {
	out    *execOutput
	stderr bool
}

func (w execWriter) Write(p []byte) (int, error) { return w.out.write(w.stderr, p) }

func (s *server) WriteFile(stream pb.Provider_WriteFileServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return toStatus(providers.Errorf(providers.InvalidArgument, "write file", "the first message of a write stream must be the header"))
	}
	pr, pw := io.Pipe()
	go func() {
		for {
			m, err := stream.Recv()
			if err == io.EOF {
				pw.Close()
				return
			}
			if err != nil {
				// The client cancelled or broke off: the provider must see a
				// failed read, never a short file that looks complete.
				pw.CloseWithError(err)
				return
			}
			d, ok := m.GetMsg().(*pb.WriteFileRequest_Data)
			if !ok {
				pw.CloseWithError(providers.Errorf(providers.InvalidArgument, "write file", "a second header in a write stream"))
				return
			}
			if _, err := pw.Write(d.Data); err != nil {
				return
			}
		}
	}()
	err = s.impl.WriteFile(ctx, h.GetSandboxId(), providers.WriteFileRequest{
		Path:    h.GetPath(),
		Mode:    h.GetMode(),
		Content: pr,
	})
	pr.Close()
	if err != nil {
		return toStatus(err)
	}
	return stream.SendAndClose(&pb.WriteFileResponse{})
}

func (s *server) ReadFile(r *pb.ReadFileRequest, stream pb.Provider_ReadFileServer) error {
	w := &chunkWriter{send: func(b []byte) error { return stream.Send(&pb.ReadFileResponse{Data: b}) }}
	_, err := s.impl.ReadFile(stream.Context(), r.GetSandboxId(), providers.ReadFileRequest{
		Path:   r.GetPath(),
		Offset: r.GetOffset(),
		Limit:  r.GetLimit(),
	}, w)
	// What the provider wrote before failing is delivered, so that the
	// count the host reports is the count the provider wrote.
	ferr := w.flush()
	if err != nil {
		return toStatus(err)
	}
	return ferr
}

// chunkWriter gathers writes into chunks of fileChunkSize, so that a
// provider copying in small pieces does not cost one message per piece.
type chunkWriter struct {
	buf  []byte
	send func([]byte) error
	err  error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if w.err != nil {
			return n, w.err
		}
		if w.buf == nil {
			w.buf = make([]byte, 0, fileChunkSize)
		}
		k := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+k]
		n += k
		p = p[k:]
		if len(w.buf) == cap(w.buf) {
			w.flush()
		}
	}
	return n, w.err
}

// ReadFrom reads straight into the chunk being filled, saving io.Copy's
// intermediate buffer.
func (w *chunkWriter) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	for w.err == nil {
		if w.buf == nil {
			w.buf = make([]byte, 0, fileChunkSize)
		}
		k, err := r.Read(w.buf[len(w.buf):cap(w.buf)])
		w.buf = w.buf[:len(w.buf)+k]
		n += int64(k)
		if len(w.buf) == cap(w.buf) {
			w.flush()
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, w.err
}

// flush sends the pending chunk. Each chunk is a fresh buffer because gRPC
// may look at a sent message after Send returns.
func (w *chunkWriter) flush() error {
	if w.err == nil && len(w.buf) > 0 {
		w.err = w.send(w.buf)
	}
	w.buf = nil
	return w.err
}

func (s *server) ListFiles(ctx context.Context, r *pb.ListFilesRequest) (*pb.ListFilesResponse, error) {
	files, err := s.impl.ListFiles(ctx, r.GetSandboxId(), r.GetPath())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ListFilesResponse{Files: make([]*pb.FileInfo, len(files))}
	for i, f := range files {
		out.Files[i] = fileInfoToProto(f)
	}
	return out, nil
}

func (s *server) EnsureSnapshot(ctx context.Context, r *pb.EnsureSnapshotRequest) (*pb.EnsureSnapshotResponse, error) {
	snap, err := s.impl.EnsureSnapshot(ctx, snapshotSpecFromProto(r.GetSpec()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.EnsureSnapshotResponse{Snapshot: snapshotToProto(snap)}, nil
}

func (s *server) GetSnapshot(ctx context.Context, r *pb.GetSnapshotRequest) (*pb.GetSnapshotResponse, error) {
	snap, err := s.impl.GetSnapshot(ctx, r.GetSlug())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.GetSnapshotResponse{Snapshot: snapshotToProto(snap)}, nil
}

func (s *server) DeleteSnapshot(ctx context.Context, r *pb.DeleteSnapshotRequest) (*pb.DeleteSnapshotResponse, error) {
	if err := s.impl.DeleteSnapshot(ctx, r.GetSlug()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.DeleteSnapshotResponse{}, nil
}

func (s *server) ListSnapshots(ctx context.Context, r *pb.ListSnapshotsRequest) (*pb.ListSnapshotsResponse, error) {
	snaps, err := s.impl.ListSnapshots(ctx, r.GetLabels())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ListSnapshotsResponse{Snapshots: make([]*pb.Snapshot, len(snaps))}
	for i, snap := range snaps {
		out.Snapshots[i] = snapshotToProto(snap)
	}
	return out, nil
}

func (s *server) CreateVolume(ctx context.Context, r *pb.CreateVolumeRequest) (*pb.CreateVolumeResponse, error) {
	v, err := s.impl.CreateVolume(ctx, volumeSpecFromProto(r.GetSpec()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.CreateVolumeResponse{Volume: volumeToProto(v)}, nil
}

func (s *server) GetVolume(ctx context.Context, r *pb.GetVolumeRequest) (*pb.GetVolumeResponse, error) {
	v, err := s.impl.GetVolume(ctx, r.GetSlug())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.GetVolumeResponse{Volume: volumeToProto(v)}, nil
}

func (s *server) DeleteVolume(ctx context.Context, r *pb.DeleteVolumeRequest) (*pb.DeleteVolumeResponse, error) {
	if err := s.impl.DeleteVolume(ctx, r.GetSlug()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.DeleteVolumeResponse{}, nil
}

func (s *server) ListVolumes(ctx context.Context, r *pb.ListVolumesRequest) (*pb.ListVolumesResponse, error) {
	vs, err := s.impl.ListVolumes(ctx, r.GetLabels())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ListVolumesResponse{Volumes: make([]*pb.Volume, len(vs))}
	for i, v := range vs {
		out.Volumes[i] = volumeToProto(v)
	}
	return out, nil
}
