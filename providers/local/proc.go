package local

import (
	"bytes"
	"os"
	"strconv"
)

type procStat struct {
	pid, ppid int
	state     byte
	start     uint64 // clock ticks after boot; tells a reused pid apart
}

// readProcStat parses /proc/<pid>/stat. The command name may contain spaces
// and parentheses, so fields are counted from the last ')'.
func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{}, false
	}
	f := bytes.Fields(b[i+2:])
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	start, err2 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{pid: pid, ppid: ppid, state: f[0][0], start: start}, true
}

func readProcs() []procStat {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]procStat, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok {
			out = append(out, st)
		}
	}
	return out
}

// processAlive reports whether pid is still the process that started at
// start, and not a zombie.
func processAlive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	st, ok := readProcStat(pid)
	return ok && st.start == start && st.state != 'Z' && st.state != 'X'
}
