"""The model zoo: small models nobody wrote for xlalab, as notebook cells.

Each entry is the source of a setup cell that defines ``model``, ``opt``, ``batch(n, t)`` (the
inputs, made on the CPU and sent to the device, each on a line of its own) and ``loss_of(x, y)``;
the shared ``STEP`` cell trains one step. ``before`` and ``after`` are the ``batch`` arguments
of the training cells and of the cell that changes one input's shape. Sizes are tiny: a zoo
model exists to exercise the analysis on real code, not to learn.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

COMMON = """\
import torch, torch.nn as nn, torch.nn.functional as F
import xlalab.core.xla_model as xm
dev = xm.xla_device()
torch.manual_seed(0)
"""

STEP = """\
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def step(x, y):
    opt.zero_grad()
    loss = loss_of(x, y)
    loss.backward()
    opt.step()
    xm.mark_step()
    return loss
"""


@dataclass(frozen=True)
class Zoo:
    name: str
    model: str  # defines model, batch(n, t) and loss_of(x, y)
    before: tuple[int, int]
    after: tuple[int, int]

    @property
    def setup(self) -> str:
        return COMMON + self.model + "\n" + STEP

    def line_of(self, marker: str) -> int:
        """The setup cell's line that ends with ``# marker``."""
        return next(i for i, line in enumerate(self.setup.splitlines(), 1) if line.endswith(f"# {marker}"))


def _lm(model: str) -> str:
    """A causal language model: labels are the inputs."""
    return model + """
def batch(n, t):
    x = torch.randint(0, 64, (n, t)).to(dev)  # MADE-x
    return x, x

def loss_of(x, y):
    return model(input_ids=x, labels=y).loss
"""


def _image_classifier(model: str, size: int) -> str:
    """An image classifier over 3 labels: RGB images of ``size`` x ``size``."""
    return model + f"""
def batch(n, t):
    x = torch.randn(n, 3, {size}, {size}).to(dev)  # MADE-x
    y = torch.randint(0, 3, (n,)).to(dev)  # MADE-y
    return x, y

def loss_of(x, y):
    return model(pixel_values=x, labels=y).loss
"""


ZOO = [
    Zoo(
        "mnist_convnet",
        """\
from xlalab.testing.workloads import MNIST
model = MNIST().to(dev)

def batch(n, t):
    x = torch.randn(n, 1, 28, 28).to(dev)  # MADE-x
    y = torch.randint(0, 10, (n,)).to(dev)  # MADE-y
    return x, y

def loss_of(x, y):
    return F.nll_loss(model(x), y)
""",
        (4, 0),
        (3, 0),
    ),
    Zoo(
        "batchnorm_avgpool_dropout_convnet",
        """\
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AvgPool2d(2),
    nn.Dropout(0.1), nn.Flatten(), nn.Linear(8 * 8 * 8, 5),
).to(dev)

def batch(n, t):
    x = torch.randn(n, 3, 16, 16).to(dev)  # MADE-x
    y = torch.randint(0, 5, (n,)).to(dev)  # MADE-y
    return x, y

def loss_of(x, y):
    return F.cross_entropy(model(x), y)
""",
        (4, 0),
        (5, 0),
    ),
    *(
        Zoo(
            rnn.lower(),
            f"""\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.{rnn}(8, 16, batch_first=True)
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])

model = Net().to(dev)

def batch(n, t):
    x = torch.randn(n, t, 8).to(dev)  # MADE-x
    y = torch.randn(n, 1).to(dev)  # MADE-y
    return x, y

def loss_of(x, y):
    return F.mse_loss(model(x), y)
""",
            (2, 5),
            (2, 6),
        )
        for rnn in ("LSTM", "GRU")
    ),
    Zoo(
        "text_classification",
        """\
class Net(nn.Module):
    # The PyTorch text-classification tutorial's model: each text's tokens in one bag.
    def __init__(self):
        super().__init__()
        self.embedding = nn.EmbeddingBag(64, 16)
        self.fc = nn.Linear(16, 4)

    def forward(self, text, offsets):
        return self.fc(self.embedding(text, offsets))

model = Net().to(dev)

def batch(n, t):
    x = torch.randint(0, 64, (n * t,)).to(dev)  # MADE-x
    y = torch.randint(0, 4, (n,)).to(dev)  # MADE-y
    return x, y

def loss_of(x, y):
    offsets = torch.arange(0, x.numel(), x.numel() // y.numel(), device=dev)
    return F.cross_entropy(model(x, offsets), y)
""",
        (4, 6),
        (4, 7),
    ),
    Zoo(
        "attention_transformer",
        """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(64, 32)
        self.block = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.1, batch_first=True)
        self.head = nn.Linear(32, 64)

    def forward(self, ids):
        return self.head(self.block(self.embed(ids)))

model = Net().to(dev)

def batch(n, t):
    x = torch.randint(0, 64, (n, t)).to(dev)  # MADE-x
    return x, x

def loss_of(x, y):
    return F.cross_entropy(model(x).reshape(-1, 64), y.reshape(-1))
""",
        (2, 8),
        (2, 9),
    ),
    Zoo(
        "hf_gpt2",
        _lm(
            """\
from transformers import GPT2Config, GPT2LMHeadModel
config = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2)
model = GPT2LMHeadModel(config).to(dev)
"""
        ),
        (2, 8),
        (2, 9),
    ),
    Zoo(
        "hf_bert",
        """\
from transformers import BertConfig, BertForSequenceClassification
config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=37, max_position_embeddings=32, num_labels=3)
model = BertForSequenceClassification(config).to(dev)

def batch(n, t):
    x = torch.randint(0, 64, (n, t)).to(dev)  # MADE-x
    y = torch.randint(0, 3, (n,)).to(dev)  # MADE-y
    return x, y

def loss_of(x, y):
    return model(input_ids=x, labels=y).loss
""",
        (2, 8),
        (2, 10),
    ),
    Zoo(
        "hf_t5",
        """\
from transformers import T5Config, T5ForConditionalGeneration
config = T5Config(vocab_size=64, d_model=32, d_kv=16, d_ff=37, num_layers=1, num_decoder_layers=1,
                  num_heads=2, decoder_start_token_id=0, pad_token_id=0)
model = T5ForConditionalGeneration(config).to(dev)

def batch(n, t):
    x = torch.randint(1, 64, (n, t)).to(dev)  # MADE-x
    y = torch.randint(1, 64, (n, 4)).to(dev)  # MADE-y
    return x, y

def loss_of(x, y):
    return model(input_ids=x, labels=y).loss
""",
        (2, 8),
        (2, 7),
    ),
    Zoo(
        "hf_llama",
        _lm(
            """\
from transformers import LlamaConfig, LlamaForCausalLM
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
model = LlamaForCausalLM(config).to(dev)
"""
        ),
        (2, 8),
        (2, 6),
    ),
    Zoo(
        "hf_vit",
        _image_classifier(
            """\
from transformers import ViTConfig, ViTForImageClassification
config = ViTConfig(image_size=16, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=1,
                   num_attention_heads=2, intermediate_size=37, num_labels=3)
model = ViTForImageClassification(config).to(dev)
""",
            16,
        ),
        (2, 0),
        (3, 0),
    ),
    Zoo(
        "hf_swin",
        _image_classifier(
            """\
from transformers import SwinConfig, SwinForImageClassification
config = SwinConfig(image_size=16, patch_size=2, num_channels=3, embed_dim=16, depths=[2], num_heads=[2],
                    window_size=4, num_labels=3, drop_path_rate=0.0)  # block 2 shifts its windows: roll, mask
model = SwinForImageClassification(config).to(dev)
""",
            16,
        ),
        (2, 0),
        (3, 0),
    ),
    Zoo(
        "hf_convnext",
        _image_classifier(
            """\
from transformers import ConvNextConfig, ConvNextForImageClassification
config = ConvNextConfig(num_channels=3, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3)
model = ConvNextForImageClassification(config).to(dev)
""",
            32,
        ),
        (2, 0),
        (3, 0),
    ),
    Zoo(
        "hf_whisper",
        """\
from transformers import WhisperConfig, WhisperForConditionalGeneration
config = WhisperConfig(vocab_size=64, num_mel_bins=8, d_model=32, encoder_layers=1, decoder_layers=1,
                       encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=37,
                       decoder_ffn_dim=37, max_source_positions=16, max_target_positions=32,
                       pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
model = WhisperForConditionalGeneration(config).to(dev)

def batch(n, t):
    x = torch.randn(n, 8, 32).to(dev)  # MADE-x
    y = torch.randint(3, 64, (n, t)).to(dev)  # MADE-y
    return x, y

def loss_of(x, y):
    return model(input_features=x, labels=y).loss
""",
        (2, 5),
        (2, 6),
    ),
    Zoo(
        "hf_wav2vec2",
        """\
from transformers import Wav2Vec2Config, Wav2Vec2ForSequenceClassification
# Layer drop off: a layer skipped at random is another graph (tests/test_lab.py checks that finding).
config = Wav2Vec2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
                        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, num_labels=3,
                        mask_time_prob=0.0, layerdrop=0.0)
model = Wav2Vec2ForSequenceClassification(config).to(dev)

def batch(n, t):
    x = torch.randn(n, t).to(dev)  # MADE-x
    y = torch.randint(0, 3, (n,)).to(dev)  # MADE-y
    return x, y

def loss_of(x, y):
    return model(input_values=x, labels=y).loss
""",
        (2, 400),
        (2, 480),
    ),
]


def no_dropout(model: nn.Module) -> None:
    """Dropout modules, and the probabilities attention reads from floats, set to zero."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
        for name, value in vars(m).items():
            if "dropout" in name and isinstance(value, float):
                setattr(m, name, 0.0)
        if isinstance(m, nn.TransformerEncoderLayer):
            m.dropout.p = m.dropout1.p = m.dropout2.p = 0.0
            m.self_attn.dropout = 0.0
