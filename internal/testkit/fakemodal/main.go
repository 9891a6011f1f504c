package fakemodal

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"
)

// Main is `sandstep fake-modal`: it serves a fake Modal on a loopback
// address until ctx ends, for trying the modal provider by hand. Point
// [provider.modal] server_url at the URL it prints and set the token
// variables to the values it was given.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fake-modal", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "loopback address to serve on")
	idEnv := fs.String("token-id-env", "MODAL_TOKEN_ID", "environment variable holding the token id clients must send")
	secretEnv := fs.String("token-secret-env", "MODAL_TOKEN_SECRET", "environment variable holding the token secret clients must send")
	dir := fs.String("dir", "", "where sandboxes keep their files (default: a temporary folder)")
	rate := fs.Int("creates-per-second", 0, "fault: refuse creates beyond this many per second with RESOURCE_EXHAUSTED (Modal's default is 5; 0 = no limit)")
	unavailable := fs.Int("unavailable-every", 0, "fault: answer every n-th control-plane call UNAVAILABLE (0 = never)")
	slow := fs.Duration("slow-create", 0, "fault: delay every create this long before it makes the sandbox")
	slowAnswer := fs.Duration("slow-create-answer", 0, "fault: delay every create answer this long after the sandbox is made")
	routerUnavailable := fs.Int("router-unavailable-every", 0, "fault: answer every n-th command router call UNAVAILABLE (0 = never)")
	lose := fs.Int("lose-create-answers", 0, "fault: the first n creates make their sandbox and answer UNAVAILABLE")
	echo := fs.Bool("echo-credentials", false, "fault: refusals and UNAVAILABLE answers repeat the request's credential headers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("fake-modal: unexpected argument %q", fs.Arg(0))
	}
	tokenID, tokenSecret := os.Getenv(*idEnv), os.Getenv(*secretEnv)
	if tokenID == "" || tokenSecret == "" {
		return fmt.Errorf("fake-modal: set %s and %s to the token clients must send", *idEnv, *secretEnv)
	}
	r, err := Start(Options{
		TokenID: tokenID, TokenSecret: tokenSecret, Dir: *dir,
		Logger: slog.New(slog.NewTextHandler(stderr, nil)),
		Faults: Faults{CreatesPerSecond: *rate, UnavailableEvery: *unavailable, SlowCreate: *slow, SlowCreateAnswer: *slowAnswer,
			RouterUnavailableEvery: *routerUnavailable, LoseCreateAnswers: *lose, EchoCredentials: *echo},
	}, *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fake Modal listening on %s; set [provider.modal] server_url to it\n", r.URL)
	<-ctx.Done()
	done := make(chan struct{})
	go func() { _ = r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	return nil
}
