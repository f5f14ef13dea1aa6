package modelanthropic

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// manyDeltas is a stream of one thinking block and one text block of n
// deltas each.
func manyDeltas(n int) string {
	var b strings.Builder
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n")
	for range n {
		b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hmm, let me think about this a bit more \"}}\n\n")
	}
	b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"c2ln\"}}\n\n")
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := range n {
		fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"w%d and then some more words to say \"}}\n\n", i%10)
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n")
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n")
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return b.String()
}

// TestManyDeltasLinear: a long answer's text and thinking are assembled
// exactly, in time linear in its deltas (the SDK's own accumulation is
// quadratic): four times the deltas may take at most ten times as long
// (quadratic assembly takes sixteen). The two sizes are timed in turns,
// the best of five each, so that a busy machine slows both alike.
func TestManyDeltasLinear(t *testing.T) {
	smallIn, largeIn := manyDeltas(4_000), manyDeltas(16_000)
	once := func(in string, n int) time.Duration {
		start := time.Now()
		resp, err := readStream(strings.NewReader(in), nil)
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Content) != 2 || resp.Content[0].Thinking != strings.Repeat("hmm, let me think about this a bit more ", n) || resp.Content[0].Signature != "c2ln" ||
			len(resp.Content[1].Text) != 35*n || !strings.HasPrefix(resp.Content[1].Text, "w0 and then some more words to say w1 ") {
			t.Fatalf("%d deltas assembled wrong: %d blocks, thinking %d bytes, text %d bytes", n, len(resp.Content), len(resp.Content[0].Thinking), len(resp.Content[1].Text))
		}
		return took
	}
	small, large := time.Duration(1<<63-1), time.Duration(1<<63-1)
	for range 5 {
		small = min(small, once(smallIn, 4_000))
		large = min(large, once(largeIn, 16_000))
	}
	t.Logf("4,000 deltas: %v, 16,000: %v", small, large)
	if large > 10*small {
		t.Errorf("16,000 deltas took %v, 4,000 took %v: more than 10x for 4x the deltas (quadratic assembly)", large, small)
	}
}
