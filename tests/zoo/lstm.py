import torch
import torch.nn as nn
import torch.nn.functional as F


class LSTMClassifier(nn.Module):
    """Embeds padded token ids, runs a 2-layer bidirectional LSTM over each sequence's own length and classifies
    from the top layer's final states in both directions."""

    def __init__(self, vocab_size=50, embedding_dim=8, hidden_dim=6, num_classes=3, n_layers=2, dropout=0.5,
                 pad_idx=0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_idx)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim, num_layers=n_layers, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(hidden_dim * 2, num_classes)
        self.dropout = nn.Dropout(dropout)

    def forward(self, text, text_lengths):
        embedded = self.dropout(self.embedding(text))
        # pack so the LSTM stops at each sequence's end (lengths must be on the CPU)
        packed_embedded = nn.utils.rnn.pack_padded_sequence(embedded, text_lengths.to("cpu"), batch_first=True,
                                                            enforce_sorted=False)
        packed_output, (hidden, cell) = self.lstm(packed_embedded)
        # hidden is (num_layers * 2, batch, hidden_dim): the last two rows are the top layer's two directions
        hidden = self.dropout(torch.cat((hidden[-2, :, :], hidden[-1, :, :]), dim=1))
        return self.fc(hidden)
