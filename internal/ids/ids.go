// Package ids holds the rule every client-chosen id follows (job, session
// and run ids): they appear in URLs, sandbox names and store keys.
package ids

// MaxLen is the longest id.
const MaxLen = 64

// Valid reports whether id is 1 to 64 of [A-Za-z0-9._-], and not "." or
// ".." (no URL can address those).
func Valid(id string) bool {
	if id == "" || len(id) > MaxLen || id == "." || id == ".." {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
