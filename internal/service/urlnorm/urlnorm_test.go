package urlnorm

import "testing"

func TestNormalize(t *testing.T) {
	for _, tc := range []struct{ in, want, key string }{
		{"HTTP://Example.COM", "http://example.com/", "http://example.com/"},
		{"https://example.com:443/a", "https://example.com/a", "https://example.com/a"},
		{"http://example.com:80/a", "http://example.com/a", "http://example.com/a"},
		{"http://example.com:8080/a", "http://example.com:8080/a", "http://example.com:8080/a"},
		{"https://example.com:80/a", "https://example.com:80/a", "https://example.com:80/a"},
		{"http://example.com/a#section", "http://example.com/a", "http://example.com/a"},
		{"http://example.com/docs/", "http://example.com/docs/", "http://example.com/docs"},
		{"http://example.com/a/./b/../c", "http://example.com/a/c", "http://example.com/a/c"},
		{"http://example.com/?b=2&a=1", "http://example.com/?a=1&b=2", "http://example.com/?a=1&b=2"},
		{"http://example.com/p?utm_source=x&id=7&UTM_Medium=y&fbclid=z&gclid=q", "http://example.com/p?id=7", "http://example.com/p?id=7"},
		{"http://example.com/p?utm_source=x", "http://example.com/p", "http://example.com/p"},
		{"http://example.com/p?", "http://example.com/p", "http://example.com/p"},
		{"http://user:secret@example.com/p", "http://example.com/p", "http://example.com/p"},
		{"http://EXAMPLE.com./p", "http://example.com/p", "http://example.com/p"},
		{"  http://example.com/p  ", "http://example.com/p", "http://example.com/p"},
		{"http://[::1]:80/p", "http://[::1]/p", "http://[::1]/p"},
		{"http://example.com/a%2Fb", "http://example.com/a%2Fb", "http://example.com/a%2Fb"},
		{"http://example.com/p?q=%zz&b=1", "http://example.com/p?q=%zz&b=1", "http://example.com/p?q=%zz&b=1"},
	} {
		got, err := Normalize(tc.in)
		if err != nil {
			t.Errorf("Normalize(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if k := Key(got); k != tc.key {
			t.Errorf("Key(%q) = %q, want %q", got, k, tc.key)
		}
	}
	for _, bad := range []string{"", "ftp://example.com/", "mailto:a@example.com", "javascript:void(0)", "/relative", "http://", "http://%zz/"} {
		if got, err := Normalize(bad); err == nil {
			t.Errorf("Normalize(%q) = %q, want an error", bad, got)
		}
	}
}
