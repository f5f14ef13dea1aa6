package e2bproto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Connect protocol envelope flags (https://connectrpc.com/docs/protocol).
const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
)

// maxFrame bounds one stream frame; envd sends output in small chunks.
const maxFrame = 16 << 20

// ErrProtocol reports a response that does not follow the Connect protocol
// (a malformed envelope, invalid JSON, a stream cut before its end).
var ErrProtocol = errors.New("malformed envd stream")

// EncodeFrame returns msg as one Connect envelope with the given flags.
func EncodeFrame(flags byte, msg []byte) []byte {
	out := make([]byte, 5+len(msg))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:5], uint32(len(msg)))
	copy(out[5:], msg)
	return out
}

// ReadFrame reads one envelope. It returns io.EOF only at a clean frame
// boundary.
func ReadFrame(r io.Reader) (flags byte, msg []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("%w: truncated frame header", ErrProtocol)
		}
		return 0, nil, err
	}
	flags = hdr[0]
	if flags&flagCompressed != 0 {
		return 0, nil, fmt.Errorf("%w: compressed frame (flags %#x) but no compression was negotiated", ErrProtocol, flags)
	}
	if flags&^flagEndStream != 0 {
		return 0, nil, fmt.Errorf("%w: unknown frame flags %#x", ErrProtocol, flags)
	}
	n := binary.BigEndian.Uint32(hdr[1:5])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("%w: frame of %d bytes exceeds the %d byte limit", ErrProtocol, n, maxFrame)
	}
	msg = make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("%w: truncated frame body (%d bytes announced)", ErrProtocol, n)
		}
		return 0, nil, err
	}
	return flags, msg, nil
}

// ProcessConfig is process.ProcessConfig in JSON form.
type ProcessConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
	// user, when set, runs the process as this user instead of
	// Config.EnvdUser (envd takes the user from the request's Basic
	// authorization).
	user string
}

// StartRequest is process.StartRequest in JSON form.
type StartRequest struct {
	Process ProcessConfig `json:"process"`
}

// StartResponse is process.StartResponse in JSON form.
type StartResponse struct {
	Event ProcessEvent `json:"event"`
}

// ProcessEvent is process.ProcessEvent (a oneof) in JSON form. Bytes fields
// are base64, as protojson writes them.
type ProcessEvent struct {
	Start     *StartEvent `json:"start,omitempty"`
	Data      *DataEvent  `json:"data,omitempty"`
	End       *EndEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

// StartEvent reports the process id.
type StartEvent struct {
	Pid uint32 `json:"pid"`
}

// DataEvent carries a chunk of output.
type DataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	Pty    []byte `json:"pty,omitempty"`
}

// EndEvent reports how the process ended. protojson omits a zero exit code.
type EndEvent struct {
	ExitCode int     `json:"exitCode"`
	Exited   bool    `json:"exited,omitempty"`
	Status   string  `json:"status,omitempty"`
	Error    *string `json:"error,omitempty"`
}

// EndOfStream is the JSON of the final (flag 0x02) frame.
type EndOfStream struct {
	Error    *ConnectError       `json:"error,omitempty"`
	Metadata map[string][]string `json:"metadata,omitempty"`
}

// ConnectError is a Connect error.
type ConnectError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *ConnectError) Error() string {
	if e.Message == "" {
		return "envd: " + e.Code
	}
	return "envd: " + e.Code + ": " + e.Message
}

// decodeEvent decodes a data frame, accepting the proto field name
// exit_code as well as the JSON name exitCode.
func decodeEvent(msg []byte) (StartResponse, error) {
	var ev StartResponse
	if err := json.Unmarshal(msg, &ev); err != nil {
		return ev, fmt.Errorf("%w: invalid event JSON: %v", ErrProtocol, err)
	}
	if ev.Event.End != nil && ev.Event.End.ExitCode == 0 {
		var alt struct {
			Event struct {
				End struct {
					ExitCode *int `json:"exit_code"`
				} `json:"end"`
			} `json:"event"`
		}
		if json.Unmarshal(msg, &alt) == nil && alt.Event.End.ExitCode != nil {
			ev.Event.End.ExitCode = *alt.Event.End.ExitCode
		}
	}
	return ev, nil
}
