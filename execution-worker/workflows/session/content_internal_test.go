package session

import (
	"encoding/json"
	"testing"

	"github.com/mangohq/mango/execution-worker/model"
	pb "github.com/mangohq/mango/proto/gen/mango/controlplane/v1"
)

func TestUserMessageKeepsImageAndDocumentBlocks(t *testing.T) {
	t.Parallel()
	image := `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}`
	doc := `{"type":"document","source":{"type":"text","media_type":"text/plain","data":"a \u003c b"},"title":"T"}`
	ev := &pb.Event{Id: "sevt_1", Type: "user.message", Body: `{"content":[{"type":"text","text":"look"},` + image + `,` + doc + `]}`}
	msg, err := userMessage(ev)
	if err != nil {
		t.Fatalf("userMessage = %v, want the message", err)
	}
	if len(msg.Content) != 3 || msg.Role != "user" {
		t.Fatalf("userMessage = %+v, want a user message with 3 blocks", msg)
	}
	if b := msg.Content[0]; b.Type != "text" || b.Text != "look" || b.Raw != nil {
		t.Errorf("block 0 = %+v, want the plain text block \"look\"", b)
	}
	for i, want := range []string{image, doc} {
		b := msg.Content[i+1]
		got, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("block %d sent as\n %s\nwant\n %s", i+1, got, want)
		}
	}
	// The transcript stores the message as JSON; read back, it is the same.
	stored, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var back model.Message
	if err := json.Unmarshal(stored, &back); err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(back)
	if string(again) != string(stored) {
		t.Errorf("transcript round trip changed the message:\n %s\n %s", stored, again)
	}
}

func TestUserMessageRejectsBlocksWithoutType(t *testing.T) {
	t.Parallel()
	ev := &pb.Event{Id: "sevt_2", Type: "user.message", Body: `{"content":[{"text":"x"}]}`}
	if msg, err := userMessage(ev); err == nil {
		t.Fatalf("userMessage = %+v, want an error for a block without type", msg)
	}
}
