"""`kvscope-cli serve` on a hybrid recurrent model (a synthetic qwen35, random weights): requests
through the `openai` package share a prefix, the second is served from a state checkpoint, and
the state pool's `kvscope:` metrics, read by prometheus_client's parser, say so: slot bytes and
dtype, slots free again when idle, checkpoints held, saved and restored, next to vLLM's
prefix-cache counters.
usage: test_state_metrics_peer.py KVSCOPE_CLI UNUSED (the model is written here)"""
import json
import os
import subprocess
import sys
import tempfile

import openai

from serve_fixture import Checks, Server, value, wait_idle

CLI = sys.argv[1]


def main():
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "qwen35.gguf")
    subprocess.run([CLI, "make-model", "--out", model, "--arch", "qwen35", "--n-layer", "4"], check=True,
                   capture_output=True)
    info = json.loads(subprocess.run([CLI, "inspect", model, "--json"], check=True, capture_output=True,
                                     text=True).stdout)
    srv = Server(CLI, model, "--state-checkpoints", "every-block", "--state-dtype", "bf16", "--block-size", "16")
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=120)
    checks = Checks()
    shared = [3 + (i * 7) % 200 for i in range(64)]

    def shared_prefix_restores_a_checkpoint():
        for tail in ([5, 6, 7, 8, 9], [11, 12, 13]):
            r = client.completions.create(model=srv.model_name, prompt=shared + tail, max_tokens=4, temperature=0,
                                          extra_body={"ignore_eos": True})
            assert r.usage.completion_tokens == 4, r.usage
        smp, idle = wait_idle(srv)
        assert idle, "server not idle"
        assert value(smp, "vllm:prefix_cache_hits_total") >= 64, value(smp, "vllm:prefix_cache_hits_total")
        assert value(smp, "kvscope:state_checkpoints_restored_total") >= 1
        assert value(smp, "kvscope:state_checkpoints_saved_total") >= 4  # 4 boundaries of 16 in the shared prefix
        held = value(smp, "kvscope:state_checkpoints", state="held", policy="every:1")
        assert held >= 4, held
        per_slot = value(smp, "kvscope:state_slot_bytes", dtype="bf16")
        assert per_slot == info["state_bytes_per_seq"] // 2, (per_slot, info["state_bytes_per_seq"])  # f32's half
        assert value(smp, "kvscope:state_checkpoint_bytes") == held * per_slot
        assert value(smp, "kvscope:state_slots", state="used") == 0
        assert value(smp, "kvscope:state_used_bytes") == 0
        assert value(smp, "kvscope:state_slots", state="free") >= 1

    checks.run("shared_prefix_restores_a_checkpoint", shared_prefix_restores_a_checkpoint)
    srv.stop()
    checks.exit()


if __name__ == "__main__":
    main()
