package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ro_paths reach a sandbox as bwrap recreates them: --ro-bind for a path,
// --symlink for a link whose target the sandbox sees. bwrap reads the
// whole mount table after every bind it makes (to set the new mount's
// flags), so each one costs about 0.1 ms, and the defaults bind twelve
// paths below /etc. As root, paths below a folder the sandbox does not see
// whole (/etc) are prepared once in the staging namespace instead: a
// read-only tmpfs holding their binds and links, a tree bwrap binds in one
// go (measured: a sandbox start 1.1 ms shorter, of 6.3 ms for bwrap
// alone). Sandboxes started while the sources stay the same files share the
// tree. A source replaced on the host (resolv.conf renamed over by a DHCP
// client, say) is seen at the next start by its inode, as bwrap binding it
// anew would: a fresh tree is made, and the old one goes once no start in
// progress binds it.

// roEntry is one ro_path as the sandbox gets it.
type roEntry struct {
	path   string // in the sandbox
	source string // host path bound at path; "" for a link
	target string // the link's target
}

// roEntries resolves ro_paths (sorted) on the host. A path that is a
// symlink (/bin -> usr/bin on merged-/usr systems) is recreated as the same
// symlink when its target is visible in the sandbox, and otherwise (say
// /etc/resolv.conf -> /run/...) its target is bound in its place. Missing
// paths are skipped: one list serves several distributions.
func roEntries(paths []string) []roEntry {
	visible := func(p string) bool {
		for _, rp := range paths {
			if p == rp || strings.HasPrefix(p, rp+"/") {
				return true
			}
		}
		return false
	}
	var out []roEntry
	for _, rp := range paths {
		fi, err := os.Lstat(rp)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			out = append(out, roEntry{path: rp, source: rp})
			continue
		}
		target, err1 := os.Readlink(rp)
		resolved, err2 := filepath.EvalSymlinks(rp)
		if err1 != nil || err2 != nil {
			continue
		}
		if visible(resolved) {
			out = append(out, roEntry{path: rp, target: target})
		} else {
			out = append(out, roEntry{path: rp, source: resolved})
		}
	}
	return out
}

func (e roEntry) args() []string {
	if e.source == "" {
		return []string{"--symlink", e.target, e.path}
	}
	return []string{"--ro-bind", e.source, e.path}
}

// roBindArgs are the bwrap arguments that recreate ro_paths one by one.
func roBindArgs(paths []string) []string {
	var args []string
	for _, e := range roEntries(paths) {
		args = append(args, e.args()...)
	}
	return args
}

// roGroup is the entries below one top-level folder, made in a tree.
type roGroup struct {
	top     string // "/etc"
	entries []roEntry
}

// roTreeArg stands in bwrap's arguments for the tree of the group with
// top, until the staging thread puts the tree's path there (see
// stager.start). A NUL cannot reach bwrap: an argument left unreplaced
// fails the start instead of binding something else.
const roTreeArg = "\x00ro-tree:"

// roStagedArgs are the bwrap arguments that recreate ro_paths through
// trees where that saves binds, and the trees' groups. Entries stay in
// ro_paths' order; a group's bind takes the place of its first entry.
func roStagedArgs(paths []string) ([]string, []roGroup) {
	entries := roEntries(paths)
	top := func(p string) string {
		if i := strings.IndexByte(p[1:], '/'); i >= 0 {
			return p[:i+1]
		}
		return ""
	}
	count := make(map[string]int)
	for _, e := range entries {
		if t := top(e.path); t != "" {
			count[t]++
		}
	}
	grouped := func(t string) bool {
		if t == "" || count[t] < 2 {
			return false
		}
		for _, p := range paths {
			if p == t {
				return false // bound whole; what lies below binds over it
			}
		}
		fi, err := os.Lstat(t)
		return err == nil && fi.IsDir()
	}
	var args []string
	var groups []roGroup
	index := make(map[string]int)
	for _, e := range entries {
		t := top(e.path)
		if !grouped(t) {
			args = append(args, e.args()...)
			continue
		}
		i, ok := index[t]
		if !ok {
			i = len(groups)
			index[t] = i
			groups = append(groups, roGroup{top: t})
			args = append(args, "--ro-bind", roTreeArg+t, t)
		}
		groups[i].entries = append(groups[i].entries, e)
	}
	return args, groups
}

// roTree is a group's tree in the staging namespace. Its fields belong to
// the staging thread.
type roTree struct {
	dir     string
	sources []fileID // of each entry's source when bound; zero: missing
	users   int      // starts in progress that bind it
	stale   bool     // a newer tree replaced it
}

type fileID struct {
	dev, ino uint64
}

func statID(path string) fileID {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}
	}
	return fileID{dev: st.Dev, ino: st.Ino}
}

// useTree returns the group's current tree, made anew when there is none
// or a source changed, and counts one more user. Call it on the staging
// thread; doneTree undoes it.
func (ns *stageNS) useTree(g roGroup) (*roTree, error) {
	t := ns.trees[g.top]
	if t != nil {
		for i, e := range g.entries {
			if e.source != "" && statID(e.source) != t.sources[i] {
				t.stale = true
				break
			}
		}
	}
	if t == nil || t.stale {
		if t != nil && t.users == 0 {
			dropTree(t)
		}
		ns.treeGen++
		nt, err := buildTree(filepath.Join(stageDir, fmt.Sprintf("ro%s-%d", strings.ReplaceAll(g.top, "/", "-"), ns.treeGen)), g)
		if err != nil {
			delete(ns.trees, g.top)
			return nil, fmt.Errorf("preparing %s for sandboxes: %w", g.top, err)
		}
		if ns.trees == nil {
			ns.trees = make(map[string]*roTree)
		}
		ns.trees[g.top], t = nt, nt
	}
	t.users++
	return t, nil
}

// doneTree lets go of a tree once bwrap has its own copy of the mount
// table; a replaced tree goes with its last user.
func (ns *stageNS) doneTree(t *roTree) {
	t.users--
	if t.stale && t.users == 0 {
		dropTree(t)
	}
}

// buildTree makes g's tree at dir: a tmpfs with the entries' links and
// bind mounts, all read-only, nosuid and nodev as bwrap's --ro-bind makes
// them (which then finds nothing to change).
func buildTree(dir string, g roGroup) (*roTree, error) {
	const flags = unix.MS_NOSUID | unix.MS_NODEV
	t := &roTree{dir: dir, sources: make([]fileID, len(g.entries))}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, "mode=0755,size=64k"); err != nil {
		os.Remove(dir)
		return nil, err
	}
	err := func() error {
		for i, e := range g.entries {
			dst := filepath.Join(dir, strings.TrimPrefix(e.path, g.top))
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if e.source == "" {
				if err := os.Symlink(e.target, dst); err != nil {
					return err
				}
				continue
			}
			fi, err := os.Stat(e.source)
			if err != nil {
				continue // gone since Configure; a later start looks again
			}
			// Below an earlier entry the mount point exists already.
			if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
				if fi.IsDir() {
					err = os.Mkdir(dst, 0o755)
				} else {
					err = os.WriteFile(dst, nil, 0o644)
				}
				if err != nil {
					return err
				}
			}
			if err := unix.Mount(e.source, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("binding %s: %w", e.source, err)
			}
			if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
				return fmt.Errorf("making %s read-only: %w", e.source, err)
			}
			// What is bound, which a rename on the host may have replaced
			// since the Stat above.
			t.sources[i] = statID(dst)
		}
		return unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, "")
	}()
	if err != nil {
		dropTree(t)
		return nil, err
	}
	return t, nil
}

func dropTree(t *roTree) {
	_ = unix.Unmount(t.dir, unix.MNT_DETACH)
	_ = os.Remove(t.dir)
}
