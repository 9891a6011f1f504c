package plugin

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandstep/sandstep/providers"
	pb "github.com/sandstep/sandstep/providers/proto"
)

var toGRPC = map[providers.Code]codes.Code{
	providers.Unknown:            codes.Unknown,
	providers.NotFound:           codes.NotFound,
	providers.AlreadyExists:      codes.AlreadyExists,
	providers.Unsupported:        codes.Unimplemented,
	providers.ResourceExhausted:  codes.ResourceExhausted,
	providers.Unavailable:        codes.Unavailable,
	providers.InvalidArgument:    codes.InvalidArgument,
	providers.DeadlineExceeded:   codes.DeadlineExceeded,
	providers.PermissionDenied:   codes.PermissionDenied,
	providers.FailedPrecondition: codes.FailedPrecondition,
	providers.Internal:           codes.Internal,
}

var fromGRPC = func() map[codes.Code]providers.Code {
	m := make(map[codes.Code]providers.Code, len(toGRPC))
	for p, g := range toGRPC {
		m[g] = p
	}
	return m
}()

// toStatus turns a provider's error into the gRPC status the protocol
// specifies: the mapped status code, plus an Error detail that keeps the
// exact provider code, the operation and the message apart so the host can
// rebuild an identical *providers.Error.
func toStatus(err error) error {
	code := providers.CodeOf(err)
	detail := &pb.Error{Code: pb.ErrorCode(code), Message: err.Error()}
	// Only a *providers.Error at the top of the chain has an op and message
	// that say everything; a wrapper around one adds words of its own.
	var pe *providers.Error
	if errors.As(err, &pe) && error(pe) == err {
		detail.Op = pe.Op
		detail.Message = pe.Message
		if pe.Err != nil {
			if detail.Message != "" {
				detail.Message += ": "
			}
			detail.Message += pe.Err.Error()
		}
	}
	g, ok := toGRPC[code]
	if !ok {
		g = codes.Unknown
	}
	st, derr := status.New(g, err.Error()).WithDetails(detail)
	if derr != nil {
		return status.Error(g, err.Error())
	}
	return st.Err()
}

// transportError is a call that failed because the plugin could not be
// reached, as opposed to a provider that answered with an error. The
// restart logic acts on it; callers see code Unavailable.
type transportError struct{ err error }

func (e *transportError) Error() string {
	return "plugin unreachable: " + status.Convert(e.err).Message()
}

func (e *transportError) Unwrap() error { return e.err }

func isTransport(err error) bool {
	var te *transportError
	return errors.As(err, &te)
}

// fromStatus turns the error of a gRPC call into a *providers.Error. ctx is
// the call's context: when it is done, the caller's deadline or cancellation
// is the cause whatever the status says, and the result wraps ctx.Err() so
// that errors.Is(err, context.Canceled) holds.
func fromStatus(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return &providers.Error{Code: providers.DeadlineExceeded, Op: op, Err: ctx.Err()}
	}
	st, ok := status.FromError(err)
	if !ok {
		return &providers.Error{Code: providers.Unavailable, Op: op, Err: &transportError{err}}
	}
	for _, d := range st.Details() {
		if e, ok := d.(*pb.Error); ok {
			if e.Op != "" {
				op = e.Op
			}
			return &providers.Error{Code: providers.Code(e.Code), Op: op, Message: e.Message}
		}
	}
	// Our servers attach a detail to every error they return, so a bare
	// Unavailable or Canceled comes from gRPC itself: the connection broke.
	switch st.Code() {
	case codes.Unavailable, codes.Canceled:
		return &providers.Error{Code: providers.Unavailable, Op: op, Err: &transportError{err}}
	}
	code, ok := fromGRPC[st.Code()]
	if !ok {
		code = providers.Unknown
	}
	return &providers.Error{Code: code, Op: op, Message: st.Message()}
}
