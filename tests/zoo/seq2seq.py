import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    """A bidirectional GRU over the embedded source; its two final states, joined, start the decoder."""

    def __init__(self, vocab_size, emb_dim, hid_dim):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim)
        self.rnn = nn.GRU(emb_dim, hid_dim, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(hid_dim * 2, hid_dim)

    def forward(self, src):
        outputs, hidden = self.rnn(self.embedding(src))
        hidden = torch.tanh(self.fc(torch.cat((hidden[-2], hidden[-1]), dim=1)))
        return outputs, hidden


class Attention(nn.Module):
    """Additive (Bahdanau) attention of the decoder state over the encoder outputs."""

    def __init__(self, enc_dim, dec_dim):
        super().__init__()
        self.attn = nn.Linear(enc_dim + dec_dim, dec_dim)
        self.v = nn.Linear(dec_dim, 1, bias=False)

    def forward(self, hidden, encoder_outputs):
        src_len = encoder_outputs.shape[1]
        hidden = hidden.unsqueeze(1).repeat(1, src_len, 1)
        energy = torch.tanh(self.attn(torch.cat((hidden, encoder_outputs), dim=2)))
        return F.softmax(self.v(energy).squeeze(2), dim=1)


class Decoder(nn.Module):
    """One step: attend, feed the token and the context to an LSTM cell, predict the next token."""

    def __init__(self, vocab_size, emb_dim, enc_dim, hid_dim):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim)
        self.attention = Attention(enc_dim, hid_dim)
        self.cell = nn.LSTMCell(emb_dim + enc_dim, hid_dim)
        self.out = nn.Linear(hid_dim + enc_dim + emb_dim, vocab_size)

    def forward(self, token, state, encoder_outputs):
        h, c = state
        embedded = self.embedding(token)
        weights = self.attention(h, encoder_outputs)
        context = torch.bmm(weights.unsqueeze(1), encoder_outputs).squeeze(1)
        h, c = self.cell(torch.cat((embedded, context), dim=1), (h, c))
        logits = self.out(torch.cat((h, context, embedded), dim=1))
        return logits, (h, c)


class Seq2Seq(nn.Module):
    """Encoder-decoder with attention, decoding with teacher forcing (it reads the target shifted by one)."""

    def __init__(self, src_vocab=40, trg_vocab=30, emb_dim=8, hid_dim=12):
        super().__init__()
        self.encoder = Encoder(src_vocab, emb_dim, hid_dim)
        self.decoder = Decoder(trg_vocab, emb_dim, hid_dim * 2, hid_dim)

    def forward(self, src, trg):
        encoder_outputs, hidden = self.encoder(src)
        state = (hidden, torch.zeros_like(hidden))
        outputs = []
        for t in range(trg.shape[1] - 1):
            logits, state = self.decoder(trg[:, t], state, encoder_outputs)
            outputs.append(logits)
        return torch.stack(outputs, dim=1)
