package spannerme

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
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
// character. It reads at most 1 MiB and one byte more: a larger file is refused. Errors:
// the read error (wrapping fs.ErrNotExist for a missing file), or a *ConfigFileError naming
// the file, the line and the field. It is safe for concurrent use.
func LoadConfig(path string) (*FileConfig, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	c, _, err := parseConfigFile(data, path)
	return c, err
}

func readConfigFile(path string) ([]byte, error) {
	data, _, err := readConfigFileInfo(path)
	return data, err
}

// readConfigFileInfo reads the file at path, at most configfile.MaxSize bytes (a larger file
// is a *ConfigFileError), and returns its content with its size and modification time as the
// opened file had them.
func readConfigFileInfo(path string) ([]byte, os.FileInfo, error) {
	data, fi, err := configfile.ReadFile(path)
	if fe := (*configfile.Error)(nil); errors.As(err, &fe) {
		return nil, nil, &ConfigFileError{File: path, Problem: fe.Problem}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("spannerme configuration: %w", err)
	}
	return data, fi, nil
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
// the endpoints section is refused. Its time and memory are linear in len(data). An
// error quotes at most 80 bytes of any value of the file, and its Field and Problem hold at
// most 256 and 512 bytes, each ending with "…[cut: N bytes in all]" when cut. It is safe for
// concurrent use and does not keep data.
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
