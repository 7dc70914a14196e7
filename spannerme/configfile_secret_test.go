package spannerme

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// token46 is a 46-byte access token, the kind of file a configuration path may point at by
// mistake; hunter2 is the password of a one-line env file.
const token46 = "ya29.a0AfB_byDq3kT9mZx7Lp2Wv8Rn4Hs6Jc1Yu5Ge0Qo"

// A configuration path pointing at a token file, or at an env file holding a password: the
// secret appears in no error of LoadConfig, and through a watcher in no log line, in neither
// ConfigStatus nor the GCPMultiEndpoint's Status (nor their JSON).
func TestAShortSecretIsNeverShown(t *testing.T) {
	if len(token46) != 46 {
		t.Fatalf("the token has %d bytes, want 46", len(token46))
	}
	for _, tc := range []struct{ name, content, secret string }{
		{"token", token46 + "\n", token46},
		{"env line", "DB_PASSWORD=hunter2\n", "hunter2"},
		{"token without a newline", token46, token46},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "token")
			if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(p)
			if err == nil || strings.Contains(err.Error(), tc.secret) || !strings.Contains(err.Error(), "not a configuration file") {
				t.Errorf("LoadConfig: %v; want an error that says what the file is and quotes none of it", err)
			}

			f := newWatchFixture(t, filepath.Join(dir, "spannerme.yaml"))
			writeByRename(t, f.path, tc.content)
			s := f.waitStatus(t, "the token file refused", func(s ConfigStatus) bool { return s.LastError != nil })
			if !strings.Contains(s.LastError.Error(), "not a configuration file") {
				t.Errorf("LastError %v; want it to say the file is not a configuration", s.LastError)
			}
			st, err := json.Marshal(f.gme.Status())
			if err != nil {
				t.Fatal(err)
			}
			cs, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			for what, text := range map[string]string{"the log": f.log.String(), "LastError": s.LastError.Error(),
				"the ConfigStatus's JSON": string(cs), "the Status's JSON": string(st)} {
				if strings.Contains(text, tc.secret) {
					t.Errorf("%s holds the secret:\n%s", what, text)
				}
			}
			if !strings.Contains(f.log.String(), "not a configuration file") {
				t.Errorf("the rejection was not logged:\n%s", f.log.String())
			}
		})
	}
}
