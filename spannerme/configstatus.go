package spannerme

import (
	"encoding/json"
	"errors"
	"time"
)

// MarshalJSON writes a ConfigStatus with its LastError as text (omitted when none).
func (s ConfigStatus) MarshalJSON() ([]byte, error) {
	type alias ConfigStatus
	j := struct {
		alias
		LastError string `json:"lastError,omitempty"`
	}{alias: alias(s)}
	if s.LastError != nil {
		j.LastError = s.LastError.Error()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes; LastError becomes an error with the text
// written.
func (s *ConfigStatus) UnmarshalJSON(b []byte) error {
	type alias ConfigStatus
	var j struct {
		alias
		LastError string `json:"lastError,omitempty"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = ConfigStatus(j.alias)
	if j.LastError != "" {
		s.LastError = errors.New(j.LastError)
	}
	return nil
}

// ConfigStatus is the status of a configuration file that a ConfigWatcher applies
// (ConfigWatcher.Status, and Status.Config of its GCPMultiEndpoint).
type ConfigStatus struct {
	// Path is the watched file, as given to WatchConfig.
	Path string `json:"path"`
	// Hash is the hex SHA-256 (FileConfig.Hash) of the configuration in force, and AppliedAt
	// when it was applied.
	Hash      string    `json:"hash"`
	AppliedAt time.Time `json:"appliedAt"`
	// Applied counts the configurations applied, the first (by WatchConfig) included.
	Applied int64 `json:"applied"`
	// LastError is the error of the last reload: nil when it applied the file or found the
	// configuration in force unchanged. A *ConfigFileError for a bad edit (errors.As), a read
	// error, or an error of UpdateMultiEndpoints. The previous configuration stays in force.
	// Its text holds at most 1024 bytes (what is cut ends with "…[cut: N bytes in all]").
	LastError error `json:"-"`
	// LastErrorAt is when LastError last happened (a file that stays bad fails again at each
	// re-read, without being parsed again, and is logged only the first time); zero when
	// there was none yet.
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
	// RestartNeeded lists what the configuration in force asks for but a running
	// GCPMultiEndpoint cannot change, sorted: "settings.<field>" for a setting, "poolSize",
	// "sessionAffinity", and "endpoints.<endpoint>" for an endpoint whose pool was dialed
	// with other EndpointOptions. They take effect when the GCPMultiEndpoint is created
	// again (an endpoint's options also when it is removed and added again). A key the file
	// leaves out asks for its default: dropping poolSize or sessionAffinity lists it too.
	// Empty when none.
	RestartNeeded []string `json:"restartNeeded,omitempty"`
	// Pending is the edit waiting to settle: content that differs from the configuration in
	// force, read but not applied yet because it has not stayed the same for
	// WatchOptions.Settle (an edit still being written, or a file replaced more often than
	// that). nil when no edit is waiting. An edit that waits more than 5 Settle intervals is
	// also logged (Warn), once.
	Pending *PendingEdit `json:"pending,omitempty"`
}

// PendingEdit is an edit of a watched configuration file waiting to settle
// (ConfigStatus.Pending).
type PendingEdit struct {
	// Since is when the watcher first read changed content after the configuration in force
	// (or the last error); the edit has been waiting since then.
	Since time.Time `json:"since"`
	// LastReadAt is when the latest version was read, and Hash its hex SHA-256.
	LastReadAt time.Time `json:"lastReadAt"`
	Hash       string    `json:"hash"`
	// Versions counts the different contents read since Since (1: the edit is waiting its
	// first Settle interval; more: the file changed again before it settled).
	Versions int `json:"versions"`
	// Why says in words why it is not applied yet.
	Why string `json:"why"`
}

func (s *ConfigStatus) clone() *ConfigStatus {
	if s == nil {
		return nil
	}
	c := *s
	c.RestartNeeded = append([]string(nil), s.RestartNeeded...)
	if s.Pending != nil {
		p := *s.Pending
		c.Pending = &p
	}
	return &c
}
