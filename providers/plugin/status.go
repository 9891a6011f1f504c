package plugin

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

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
	details := []protoadapt.MessageV1{detail}
	// Bad settings travel as the standard BadRequest detail, one violation
	// per key, so that the host can point at each key's line.
	var se *providers.SettingsError
	if errors.As(err, &se) {
		br := &errdetails.BadRequest{}
		for _, p := range se.Problems {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: p.Key, Description: p.Message})
		}
		details = append(details, br)
	}
	st, derr := status.New(g, err.Error()).WithDetails(details...)
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
	var (
		detail   *pb.Error
		settings *providers.SettingsError
	)
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *pb.Error:
			detail = d
		case *errdetails.BadRequest:
			settings = &providers.SettingsError{}
			for _, v := range d.GetFieldViolations() {
				settings.Problems = append(settings.Problems, providers.SettingProblem{Key: v.GetField(), Message: v.GetDescription()})
			}
		}
	}
	if detail != nil {
		if detail.Op != "" {
			op = detail.Op
		}
		pe := &providers.Error{Code: providers.Code(detail.Code), Op: op, Message: detail.Message}
		if settings != nil {
			// The message says what the settings error says; carrying the
			// error instead keeps errors.As working on the host.
			if m, ok := strings.CutSuffix(pe.Message, settings.Error()); ok {
				pe.Message, pe.Err = strings.TrimSuffix(m, ": "), settings
			}
		}
		return pe
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
