package local

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// When the plugin runs as root, volumes, snapshots and the agent with the
// tools are ext4 file systems in sparse image files under state_dir,
// loop-mounted in the staging mount namespace and bound from there by
// bwrap. A file system of a volume's capacity stops a writer at that
// capacity (ENOSPC), and a sandbox's mountinfo shows only paths within
// these file systems, never where state_dir or the tools live on the host.
// The mount a sandbox holds lives in its own mount namespace only: the
// staging namespace lets go of it once bwrap has made its copy, so when
// the sandbox ends, the file system is unmounted and its loop device
// detaches itself (LO_FLAGS_AUTOCLEAR).
//
// One image is never mounted through two loop devices at once while
// either is writable: two superblocks writing one file system corrupt it.
// Before a writable mount, and before a built snapshot is published, the
// plugin waits until no loop device backs the image any more (a sandbox's
// mount namespace is torn down asynchronously after its last process).
// Read-only images (snapshots, the agent and tools) are attached read-only;
// several plugin processes may each mount one.

// Options of every ext4 mount: the kernel does not zero inode tables in
// the background (mkfs left them uninitialised, which ext4 tracks), which
// would fill the sparse image with zeroes.
const imageMountOpts = "noinit_itable"

// findMkfs locates mkfs.ext4 (Debian package e2fsprogs); a plugin's PATH
// may lack the sbin directories.
func findMkfs() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("mkfs.ext4 is not installed (Debian package e2fsprogs)")
}

// makeImage writes a sparse ext4 image of sizeMB to path, holding the
// files of from when it is not "". The inode tables and the journal are
// left uninitialised (lazy_itable_init, lazy_journal_init), so the image
// takes a few hundred KiB of disk until files are written; 8 KiB per inode
// leaves room for trees of many small files (node_modules). A file system
// without a journal serves images that are written once.
func makeImage(ctx context.Context, mkfs, path string, sizeMB int64, from string, journal bool) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(sizeMB << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	args := []string{"-q", "-F", "-m", "0", "-i", "8192", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-L", "sandstep"}
	if !journal {
		args = append(args, "-O", "^has_journal")
	}
	if from != "" {
		args = append(args, "-d", from)
	}
	args = append(args, path)
	cmd := exec.CommandContext(ctx, mkfs, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %v: %s", filepath.Base(path), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ext4Usage is what an ext4 superblock says about space.
type ext4Usage struct {
	blocks, free, blockSize uint64
}

func (u ext4Usage) usedBytes() int64 { return int64((u.blocks - min(u.free, u.blocks)) * u.blockSize) }

// readExt4Usage reads the superblock of the ext4 image at path. Its free
// count is exact once the file system is unmounted.
func readExt4Usage(path string) (ext4Usage, error) {
	f, err := os.Open(path)
	if err != nil {
		return ext4Usage{}, err
	}
	defer f.Close()
	var sb [1024]byte
	if _, err := f.ReadAt(sb[:], 1024); err != nil {
		return ext4Usage{}, err
	}
	le := binary.LittleEndian
	if le.Uint16(sb[0x38:]) != 0xEF53 {
		return ext4Usage{}, fmt.Errorf("%s: not an ext4 file system", path)
	}
	u := ext4Usage{
		blocks:    uint64(le.Uint32(sb[0x04:])),
		free:      uint64(le.Uint32(sb[0x0C:])),
		blockSize: 1024 << le.Uint32(sb[0x18:]),
	}
	if le.Uint32(sb[0x60:])&0x80 != 0 { // INCOMPAT_64BIT
		u.blocks |= uint64(le.Uint32(sb[0x150:])) << 32
		u.free |= uint64(le.Uint32(sb[0x158:])) << 32
	}
	return u, nil
}

// loopDevicesOf lists the loop devices ("loop3") whose backing file is
// image: sysfs names the backing file by path, the device's status by
// inode, and both must match.
func loopDevicesOf(image string) []string {
	fi, err := os.Stat(image)
	if err != nil {
		return nil
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	want := image
	if r, err := filepath.EvalSymlinks(image); err == nil {
		want = r
	}
	entries, _ := os.ReadDir("/sys/block")
	var out []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "loop") {
			continue
		}
		b, err := os.ReadFile("/sys/block/" + e.Name() + "/loop/backing_file")
		if err != nil || strings.TrimSuffix(string(b), "\n") != want {
			continue
		}
		if st != nil {
			if fd, err := unix.Open("/dev/"+e.Name(), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
				info, err := unix.IoctlLoopGetStatus64(fd)
				unix.Close(fd)
				if err == nil && (info.Inode != st.Ino || info.Device != st.Dev) {
					continue
				}
			}
		}
		out = append(out, e.Name())
	}
	return out
}

// errImageBusy says that an image is still held by a sandbox that ended.
var errImageBusy = errors.New("the image is still attached to a loop device")

// waitDetached waits until no loop device backs image: the last holder's
// mount namespace is torn down asynchronously after its last process.
func waitDetached(ctx context.Context, image string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		devs := loopDevicesOf(image)
		if len(devs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (%s) after %s", errImageBusy, strings.Join(devs, ", "), timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 20*time.Millisecond)
	}
}

// mountImage attaches image to a free loop device and mounts it at target
// in the calling thread's mount namespace (the staging thread). readOnly
// attaches the device read-only too, so that nothing, not even journal
// recovery, writes to the image. The device detaches itself when the file
// system is unmounted for good.
func mountImage(image, target string, readOnly bool) error {
	mode := os.O_RDWR
	if readOnly {
		mode = os.O_RDONLY
	}
	img, err := os.OpenFile(image, mode|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer img.Close()
	ctl, err := os.OpenFile(loopControl, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	flags := uint32(unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO)
	if readOnly {
		flags |= unix.LO_FLAGS_READ_ONLY
	}
	mflags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if readOnly {
		mflags |= unix.MS_RDONLY
	}
	// Another process may take the free device first: ask again.
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("finding a free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && attempt < 100 {
			// A device just made: devtmpfs has not made its node yet.
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			return fmt.Errorf("opening %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = flags
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], filepath.Base(image))
		err = unix.IoctlLoopConfigure(fd, &cfg)
		if errors.Is(err, unix.EINVAL) && cfg.Info.Flags&unix.LO_FLAGS_DIRECT_IO != 0 {
			// The image's file system does not do direct I/O: go through
			// its page cache instead.
			flags &^= unix.LO_FLAGS_DIRECT_IO
			cfg.Info.Flags = flags
			err = unix.IoctlLoopConfigure(fd, &cfg)
		}
		if errors.Is(err, unix.EBUSY) && attempt < 100 {
			unix.Close(fd)
			continue
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("attaching %s to %s: %w", filepath.Base(image), dev, err)
		}
		err = unix.Mount(dev, target, "ext4", mflags, imageMountOpts)
		// The mount holds the device now; without it, this close detaches
		// it (autoclear).
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("mounting %s: %w", filepath.Base(image), err)
		}
		return nil
	}
}

// fsRoot is the root directory of a file system the staging thread has
// mounted, reachable from any thread of the plugin through /proc/self/fd.
type fsRoot struct{ f *os.File }

// path names the root for path-based calls from any thread.
func (r fsRoot) path() string { return fmt.Sprintf("/proc/self/fd/%d/.", r.f.Fd()) }

func (r fsRoot) close() { r.f.Close() }

// prepareRoot readies a file system's root for a sandbox: the empty
// lost+found that mkfs makes goes (it would show in /workspace), and the
// root belongs to uid. freed is what lost+found took.
func prepareRoot(root string, uid int) (freed int64, err error) {
	lf := filepath.Join(root, "lost+found")
	if fi, err := os.Lstat(lf); err == nil && fi.IsDir() {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == 0 && unix.Rmdir(lf) == nil {
			freed = st.Blocks * 512
		}
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return freed, err
	}
	return freed, os.Lchown(root, uid, uid)
}

// sharedImages are the read-only images (snapshots, the agent and tools)
// this plugin process has mounted in its staging namespace, once each, for
// every sandbox to bind.
type sharedImages struct {
	mu     sync.Mutex
	mounts map[string]string // image path -> mount point in the staging namespace
}

const sharedDir = stageDir + "/shared"

// sharedImage returns where image is mounted read-only in the staging
// namespace, mounting it on first use.
func (p *Provider) sharedImage(ns *stageNS, image string) (string, error) {
	p.shared.mu.Lock()
	defer p.shared.mu.Unlock()
	if dir, ok := p.shared.mounts[image]; ok {
		return dir, nil
	}
	dir := filepath.Join(sharedDir, filepath.Base(image))
	err := ns.do(func() error {
		if err := os.Mkdir(sharedDir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := mountImage(image, dir, true); err != nil {
			_ = os.Remove(dir)
			return err
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if p.shared.mounts == nil {
		p.shared.mounts = make(map[string]string)
	}
	p.shared.mounts[image] = dir
	return dir, nil
}

// dropSharedImage unmounts image from the staging namespace. Sandboxes
// that bound it keep their own mounts.
func (p *Provider) dropSharedImage(ns *stageNS, image string) {
	p.shared.mu.Lock()
	dir, ok := p.shared.mounts[image]
	delete(p.shared.mounts, image)
	p.shared.mu.Unlock()
	if !ok || ns == nil {
		return
	}
	_ = ns.do(func() error {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			p.log.Warn("unmounting a shared image", "image", filepath.Base(image), "err", err)
			return nil
		}
		return os.Remove(dir)
	})
}

// pruneSharedImages unmounts the shared images whose file is gone: a
// snapshot another plugin process deleted, an agent and tools image
// replaced by a newer one.
func (p *Provider) pruneSharedImages(ns *stageNS) {
	p.shared.mu.Lock()
	var gone []string
	for image := range p.shared.mounts {
		if _, err := os.Stat(image); errors.Is(err, os.ErrNotExist) {
			gone = append(gone, image)
		}
	}
	p.shared.mu.Unlock()
	for _, image := range gone {
		p.dropSharedImage(ns, image)
	}
}

// withImage mounts image writable in the staging namespace, runs f on its
// root from the calling goroutine, unmounts it and waits until its loop
// device is gone, so that the next mount of the image is the only one.
func (p *Provider) withImage(ctx context.Context, ns *stageNS, image string, f func(root string) error) error {
	if err := waitDetached(ctx, image, imageReleaseWait); err != nil {
		return err
	}
	dir := filepath.Join(stageDir, "work-"+newID())
	var root *os.File
	err := ns.do(func() error {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		if err := mountImage(image, dir, false); err != nil {
			_ = os.Remove(dir)
			return err
		}
		var err error
		if root, err = os.Open(dir); err != nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
			_ = os.Remove(dir)
		}
		return err
	})
	if err != nil {
		return err
	}
	ferr := f(fsRoot{root}.path())
	root.Close()
	// Detached, not unmounted: a bwrap starting meanwhile copied the
	// staging namespace with this mount in it, and holds it until it has
	// set up its sandbox's root. The wait below outlasts that.
	uerr := ns.do(func() error {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s: %w", filepath.Base(image), err)
		}
		return os.Remove(dir)
	})
	if err := errors.Join(ferr, uerr); err != nil {
		return err
	}
	return waitDetached(ctx, image, imageReleaseWait)
}

// imageReleaseWait bounds the wait for an ended sandbox's hold on an image.
const imageReleaseWait = 15 * time.Second

// copyTree copies the regular files, directories and symlinks below src to
// dst (which must not exist), keeping modes and modification times.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(to, fi.Mode().Perm()|0o700); err != nil {
				return err
			}
		case d.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			if err := copyFile(path, to, fi.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil // sockets, devices and pipes are not tools
		}
		return os.Chtimes(to, fi.ModTime(), fi.ModTime())
	})
}

// dirBytes sums what the files below root hold, for sizing an image.
func dirBytes(root string) (n int64, files int, err error) {
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		files++
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, files, err
}

// imageSizeFor sizes an image to hold content bytes in files entries: the
// content in 4 KiB blocks, an inode each, and a margin for the file system.
func imageSizeFor(content int64, files int) int64 {
	return (content+int64(files)*(4<<10+8<<10))*5/4>>20 + 16
}
