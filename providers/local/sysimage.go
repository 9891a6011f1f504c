package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// As root, the agent binary and tools_dir reach sandboxes in one read-only
// ext4 image, state_dir/images/sys-<fingerprint>.img, mounted once in the
// staging namespace: bound from there they show in a sandbox's mountinfo
// as /agent and /tools of that file system, not as host paths. The image
// is rebuilt when its content changes (a new plugin binary, a rebuilt
// crawler); sandboxes started earlier keep the one they bound.

// sysImage is the image in use by this plugin process.
type sysImage struct {
	mu    sync.Mutex
	fp    string // fingerprint of the content
	image string
}

// systemFiles returns what bwrap binds at agentPath and ToolsPath ("" =
// no tools), through st in directory mode.
func (p *Provider) systemFiles(ctx context.Context, s settings, st *stager) (agent, tools string, err error) {
	if !s.images {
		agent = st.path(s.agentBin, "agent")
		if s.toolsDir != "" {
			tools = st.path(s.toolsDir, "tools")
		}
		return agent, tools, nil
	}
	dir, hasTools, err := p.sysMount(ctx, s)
	if err != nil {
		return "", "", err
	}
	if hasTools {
		tools = dir + "/tools"
	}
	return dir + "/agent", tools, nil
}

// sysMount returns where the current image is mounted in the staging
// namespace, building it first when the content changed.
func (p *Provider) sysMount(ctx context.Context, s settings) (dir string, hasTools bool, err error) {
	fp, hasTools, err := sysFingerprint(s)
	if err != nil {
		return "", false, fmt.Errorf("tools_dir: %w", err)
	}
	p.sys.mu.Lock()
	defer p.sys.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if p.sys.fp != fp {
			// The image of the old content is unmounted by the reaper
			// (pruneSharedImages) once its file is gone, not here: a
			// sandbox starting now may be about to bind it.
			image, err := p.buildSysImage(ctx, s, fp, hasTools)
			if err != nil {
				return "", false, err
			}
			p.sys.fp, p.sys.image = fp, image
		}
		dir, err = p.sharedImage(s.stage, p.sys.image)
		if errors.Is(err, fs.ErrNotExist) && attempt == 0 {
			// Another plugin process replaced it meanwhile: build it again.
			p.sys.fp = ""
			continue
		}
		return dir, hasTools, err
	}
}

// sysFingerprint names the image's content: the agent binary (whose
// installed name holds its size and mtime) and every entry of tools_dir.
func sysFingerprint(s settings) (string, bool, error) {
	h := sha256.New()
	fmt.Fprintf(h, "agent %s\n", filepath.Base(s.agentBin))
	hasTools := false
	if s.toolsDir != "" {
		err := filepath.WalkDir(s.toolsDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(s.toolsDir, path)
			fmt.Fprintf(h, "%q %o %d %d\n", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
			return nil
		})
		if errors.Is(err, fs.ErrNotExist) {
			err = nil // removed since Configure: nothing to mount
		} else {
			hasTools = true
		}
		if err != nil {
			return "", false, err
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), hasTools, nil
}

func sysImagePath(s settings, fp string) string {
	return filepath.Join(s.stateDir, "images", "sys-"+fp+".img")
}

// buildSysImage makes the image for fingerprint fp unless it exists, and
// removes images of other content (plugin processes that mounted one keep
// it until they let go).
func (p *Provider) buildSysImage(ctx context.Context, s settings, fp string, hasTools bool) (string, error) {
	image := sysImagePath(s, fp)
	lock, err := lockFile(ctx, filepath.Join(s.stateDir, "locks", "sys-"+fp+".lock"))
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if _, err := os.Stat(image); err == nil {
		return image, nil
	}
	tmp := filepath.Join(s.stateDir, "images", ".build-"+newID())
	defer removeAll(tmp)
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	agent := filepath.Join(tmp, "agent")
	if os.Link(s.agentBin, agent) != nil {
		if err := copyFile(s.agentBin, agent, 0o755); err != nil {
			return "", err
		}
	}
	if hasTools {
		if err := copyTree(s.toolsDir, filepath.Join(tmp, "tools")); err != nil {
			return "", fmt.Errorf("copying tools_dir: %w", err)
		}
	}
	content, files, err := dirBytes(tmp)
	if err != nil {
		return "", err
	}
	part := image + ".tmp-" + newID()
	if err := makeImage(ctx, s.mkfs, part, imageSizeFor(content, files), tmp, false); err != nil {
		os.Remove(part)
		return "", err
	}
	if err := os.Rename(part, image); err != nil {
		os.Remove(part)
		return "", err
	}
	entries, _ := os.ReadDir(filepath.Dir(image))
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, "sys-") && strings.HasSuffix(n, ".img") && n != filepath.Base(image) {
			os.Remove(filepath.Join(filepath.Dir(image), n))
		}
	}
	p.log.Info("agent and tools image built", "image", filepath.Base(image), "bytes", content)
	return image, nil
}
