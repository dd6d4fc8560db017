"""Delta Sharing recipients (tsb_recipient): bearer tokens of their own, scoped to one share

A share profile used to carry the user's Airflow JWT; a recipient holds a random token whose
SHA-256 digest is stored here, with its share, expiry and revocation.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 22:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'tsb_recipient',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('name', sa.String(length=250), nullable=False),
        sa.Column('share', sa.String(length=300), nullable=False),
        sa.Column('token_sha256', sa.String(length=64), nullable=False),
        sa.Column('created_by', sa.String(length=250), nullable=False),
        sa.Column('created_at_ms', sa.BigInteger(), nullable=False),
        sa.Column('expires_at_ms', sa.BigInteger(), nullable=False),
        sa.Column('revoked_at_ms', sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_tsb_recipient')),
        sa.UniqueConstraint('token_sha256', name=op.f('uq_tsb_recipient_token_sha256')),
    )
    op.create_index(op.f('ix_tsb_recipient_share'), 'tsb_recipient', ['share'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_tsb_recipient_share'), table_name='tsb_recipient')
    op.drop_table('tsb_recipient')
