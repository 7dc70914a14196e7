package spannerme

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
)

// FileConfig is a parsed configuration file (LoadConfig, ParseConfig): what
// NewMultiEndpointClientWithSettings and NewGCPMultiEndpointWithSettings take. The file's
// schema is in docs/configuration.md; testdata/config-*.yaml and .json are
// examples.
type FileConfig struct {
	// Options holds the groups (MultiEndpoints) and the Default group, and, when the file
	// sets poolSize or sessionAffinity, GRPCgcpConfig (else nil: the defaults). DialFunc is
	// nil. Options was validated as NewGCPMultiEndpoint validates it.
	Options *grpcgcp.GCPMultiEndpointOptions
	// Settings holds the file's settings section, EndpointOptions from its endpoints
	// section, and DirectedReads and Hedging from its groups' directedReads and hedging. What a file cannot hold is zero (Logger, OnSwitch, OnHealth, MeterProvider,
	// Health.Probe): set it before use.
	Settings Settings
	// Hash is the hex SHA-256 of the file's bytes.
	Hash string
}

// LoadConfig reads and parses the configuration file at path, YAML or JSON, as ParseConfig
// does; a file whose name ends in ".json" (in any case) is read as JSON whatever its first
// character. It is LoadConfigContext with a deadline of 10 seconds for reading the file.
// Errors and concurrency: LoadConfigContext's.
func LoadConfig(path string) (*FileConfig, error) {
	ctx, cancel := context.WithTimeout(context.Background(), configfile.ReadTimeout)
	defer cancel()
	return LoadConfigContext(ctx, path)
}

// LoadConfigContext is LoadConfig with ctx bounding the read of the file: it returns when ctx
// ends, whatever the read is doing (a read stuck on a network or FUSE file system finishes
// in its own goroutine). The file must be a regular file (or a symlink to one): it is opened
// without blocking and anything else (a named pipe, a directory, a device, a socket) is
// refused, naming its kind. It reads at most 1 MiB and one byte more: a larger file is
// refused. Errors: a *ConfigFileError naming the file (and the line and field of a mistake
// in it) for a file that is not a regular file, is too large, or is not a valid
// configuration; the read error otherwise (wrapping fs.ErrNotExist for a missing file, and
// ctx's error when ctx ended first). It is safe for concurrent use.
func LoadConfigContext(ctx context.Context, path string) (*FileConfig, error) {
	data, _, err := configfile.ReadFileContext(ctx, path)
	if err != nil {
		return nil, configReadError(path, err)
	}
	c, _, err := parseConfigFile(data, path)
	return c, err
}

// configReadError is the error of LoadConfig and of a watcher for err, an error of
// configfile.ReadFile: a *ConfigFileError for a file refused by its kind or size, else err
// prefixed.
func configReadError(path string, err error) error {
	if fe := (*configfile.Error)(nil); errors.As(err, &fe) {
		return &ConfigFileError{File: path, Problem: fe.Problem}
	}
	return fmt.Errorf("spannerme configuration: %w", err)
}

// ParseConfig parses a configuration file's content, YAML or JSON. Content whose first
// character other than white space is '{' is JSON, parsed by encoding/json (RFC 8259: no
// trailing commas, no comments); anything else is YAML (go.yaml.in/yaml/v3), where a tab
// used for indentation is an error that says so.
//
// It is strict: an unknown field (the error names the nearest known one), a value of the
// wrong type (a number or true/false written in quotes is a string: "poolSize": "4" is an
// error), a bad duration, a field given twice or an invalid configuration (as
// NewGCPMultiEndpoint judges it) is an error. Options of an endpoint that no group lists are
// accepted, as Settings.EndpointOptions accepts them: they apply once a group lists the
// endpoint. Errors are *ConfigFileError, naming the line, the column when known, and the
// field.
//
// It is bounded: content over 1 MiB, more than 100,000 values (every mapping, list, key and
// scalar counts one; a YAML alias, *name, counts as the values of its anchor), more than
// 1000 groups, 100 endpoints in a group, 1000 distinct endpoints in all or 1000 entries in
// the endpoints section is refused. Its time and memory are linear in len(data). Content
// that is one value or a list (an access token, a password, a key: a path pointed at the
// wrong file) is "not a configuration file", with its kind and length and none of it quoted.
// Any other error quotes at most 80 bytes of any value of the file, and its Field and Problem
// hold at most 256 and 512 bytes, each ending with "…[cut: N bytes in all]" when cut. It is
// safe for concurrent use and does not keep data.
func ParseConfig(data []byte) (*FileConfig, error) {
	c, _, err := parseConfigFile(data, "")
	return c, err
}

// parseConfigFile is ParseConfig of the content of the file at path ("" for none): a path
// ending in ".json" is read as JSON, and its errors name the file. It also returns the
// parsed form of what it validated, which a watcher applies as is.
func parseConfigFile(data []byte, path string) (*FileConfig, *parsedFile, error) {
	c, parsed, err := parseConfigData(data, strings.EqualFold(filepath.Ext(path), ".json"))
	if de := (*configfile.Error)(nil); errors.As(err, &de) {
		err = &ConfigFileError{Line: de.Line, Column: de.Column, Field: de.Field, Problem: de.Problem}
	}
	if fe := (*ConfigFileError)(nil); errors.As(err, &fe) {
		fe.File = path
		fe.Field = bounded.Text(fe.Field, maxErrorField)
		fe.Problem = bounded.Text(fe.Problem, maxErrorProblem)
	}
	return c, parsed, err
}

func parseConfigData(data []byte, isJSON bool) (*FileConfig, *parsedFile, error) {
	dec, root, err := configfile.Parse(data, isJSON)
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256(data)
	d := &fileDecoder{Decoder: dec}
	if err := dec.Root(root); err != nil {
		return nil, nil, err
	}
	if err := d.decode(root); err != nil {
		return nil, nil, err
	}
	c := &FileConfig{Options: d.options, Settings: d.settings, Hash: hex.EncodeToString(sum[:])}
	parsed, err := d.validate()
	if err != nil {
		return nil, nil, err
	}
	return c, parsed, nil
}
