"""barrier domains: topologies that share root tables share barrier ids;
the barrier log location of each topology

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 16:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tsb_topology', schema=None) as batch_op:
        batch_op.add_column(sa.Column('barrier_domain', sa.String(length=250), nullable=True))
        batch_op.add_column(sa.Column('barrier_log', sa.Text(), nullable=True))
        batch_op.create_index(batch_op.f('ix_tsb_topology_barrier_domain'), ['barrier_domain'], unique=False)
    op.create_table(
        'tsb_topology_root',
        sa.Column('topology', sa.String(length=250), nullable=False),
        sa.Column('table_id', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(['table_id'], ['tsb_table.id'], name=op.f('fk_tsb_topology_root_table_id_tsb_table')),
        sa.ForeignKeyConstraint(['topology'], ['tsb_topology.name'],
                                name=op.f('fk_tsb_topology_root_topology_tsb_topology')),
        sa.PrimaryKeyConstraint('topology', 'table_id', name=op.f('pk_tsb_topology_root')),
    )
    with op.batch_alter_table('tsb_topology_root', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_tsb_topology_root_table_id'), ['table_id'], unique=False)
    # every existing root table is read by the topology it belongs to
    op.execute("INSERT INTO tsb_topology_root (topology, table_id) SELECT topology, id FROM tsb_table WHERE kind = 'root'")


def downgrade() -> None:
    with op.batch_alter_table('tsb_topology_root', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_tsb_topology_root_table_id'))
    op.drop_table('tsb_topology_root')
    with op.batch_alter_table('tsb_topology', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_tsb_topology_barrier_domain'))
        batch_op.drop_column('barrier_log')
        batch_op.drop_column('barrier_domain')
