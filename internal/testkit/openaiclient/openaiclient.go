// Package openaiclient reads an agent run's OpenAI view
// (GET /v1/agent-runs/{id}/events?format=openai-chunks) with OpenAI's
// official client, the npm package openai that make deps installs from
// package-lock.json, run on the machine's Node: the client is the judge of
// the view, as a real application would consume it.
package openaiclient

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandstep/sandstep/internal/testkit/testbin"
)

// Chunk is a chat.completion.chunk as the client yields it.
type Chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role             string  `json:"role"`
			Content          *string `json:"content"`
			ReasoningContent string  `json:"reasoning_content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Event map[string]any `json:"sandstep_event"`
}

// Completion is the chat completion the client's ChatCompletionStream
// accumulated from the chunks.
type Completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

// module finds the openai package: $SANDSTEP_NODE_MODULES, else the
// module root's node_modules. Without it the test is skipped, or fails
// under CI.
func module(t testing.TB) (dir, script string) {
	t.Helper()
	root, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(root, "internal", "testkit", "openaiclient", "read_chunks.mjs")
	for _, d := range []string{os.Getenv("SANDSTEP_NODE_MODULES"), filepath.Join(root, "node_modules")} {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "openai", "lib", "ChatCompletionStream.mjs")); err == nil {
			return filepath.Join(d, "openai"), script
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("the npm package openai is not installed: make deps installs it (package-lock.json pins it)")
	}
	t.Skip("the npm package openai is not installed (make deps)")
	return "", ""
}

// Read streams run's chunks with the official client, from the start or
// after lastEventID (a seq; "" for none), calling each for every chunk as
// it arrives, and returns the accumulated completion. A chunk stream the
// client refuses (no role, no finish_reason, not JSON, an error object)
// fails t.
func Read(ctx context.Context, t testing.TB, baseURL, token, run, lastEventID string, each func(Chunk)) Completion {
	t.Helper()
	testbin.RequireTool(t, "node", "nodejs")
	dir, script := module(t)
	args := []string{script, dir, baseURL, token, run}
	if lastEventID != "" {
		args = append(args, lastEventID)
	}
	cmd := exec.CommandContext(ctx, "node", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	defer func() {
		// each may end the test early: the client goes with it.
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	var final *Completion
	var failure string
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
	for sc.Scan() {
		var line struct {
			Chunk *Chunk      `json:"chunk"`
			Final *Completion `json:"final"`
			Error string      `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			failure = fmt.Sprintf("the client printed %q: %v", sc.Text(), err)
			break
		}
		switch {
		case line.Chunk != nil && each != nil:
			each(*line.Chunk)
		case line.Final != nil:
			final = line.Final
		case line.Error != "":
			failure = "the OpenAI client refused the stream: " + line.Error
		}
	}
	if failure != "" {
		_ = cmd.Process.Kill() // it may still be writing
	}
	err = cmd.Wait()
	waited = true
	switch {
	case failure != "":
		t.Fatalf("%s\nstderr: %s", failure, stderr.String())
	case err != nil || final == nil:
		t.Fatalf("the OpenAI client: %v (final %v)\nstderr: %s", err, final != nil, stderr.String())
	}
	return *final
}
